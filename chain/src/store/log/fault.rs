//! A simulated disk for tests, behind the store's file trait ([`super::vfs::Vfs`]).
//!
//! [`FaultFs`] follows RocksDB's `FaultInjectionTestFS`: it keeps, beside what a process sees,
//! what would survive a power cut. Data reaches the durable view only through a file sync,
//! and a file's creation, rename or removal only through a sync of its directory. A
//! [`FaultFs::crash`] (at a chosen operation, or at once) drops everything else; unsynced
//! appended bytes may survive in part, as a torn tail or as zeros. After it, every operation
//! fails until [`FaultFs::reboot`], as if the machine were off.
//!
//! It also fails single operations with `EIO` while the machine stays on
//! ([`FaultFs::fail_after`]), as a dying disk does. A failed sync behaves as Linux's does
//! (the PostgreSQL "fsyncgate" finding): the dirty data stays visible to processes but is
//! marked clean, so a later sync that succeeds does not write it, and the disk keeps zeros
//! there. Only cutting the file below that data removes it.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::store::error::StoreResult;

use super::vfs::{VFile, VLock, Vfs};

/// One file's contents: what processes see, and what a power cut would leave.
#[derive(Default)]
struct Inode {
    data: Vec<u8>,
    durable: Vec<u8>,
    /// Bytes of `data` whose write-back failed: processes still read them, but the disk holds
    /// zeros there, and no later sync writes them.
    lost: Option<std::ops::Range<usize>>,
}

impl Inode {
    /// A successful sync: the disk gets what processes see, except where write-back failed.
    fn sync(&mut self) {
        self.durable = self.data.clone();
        if let Some(lost) = &self.lost {
            let end = lost.end.min(self.durable.len());
            let start = lost.start.min(end);
            self.durable[start..end].fill(0);
        }
    }

    /// A failed sync: nothing new reaches the disk, and what was dirty is dropped as clean.
    fn fail_sync(&mut self) {
        let from = self.durable.len().min(self.data.len());
        let start = self.lost.as_ref().map_or(from, |l| l.start.min(from));
        if self.data.len() > start {
            self.lost = Some(start..self.data.len());
        }
    }

    /// Cuts (or extends with zeros) what processes see to `len` bytes.
    fn set_len(&mut self, len: usize) {
        self.data.resize(len, 0);
        if let Some(lost) = &self.lost {
            self.lost = (lost.start < len).then(|| lost.start..lost.end.min(len));
        }
    }
}

/// Which operations an injected `EIO` hits ([`FaultFs::fail_after`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Creating, appending to, cutting, renaming or removing a file.
    Write,
    /// Syncing a file or a directory.
    Sync,
}

/// An armed `EIO`.
struct Eio {
    fault: Fault,
    /// Operations of that kind still to succeed before one fails.
    countdown: u64,
    /// Whether every later operation of that kind fails too (a dead disk), or only one.
    sticky: bool,
    fired: bool,
}

/// The whole simulated disk.
#[derive(Default)]
struct Disk {
    inodes: BTreeMap<u64, Inode>,
    next_inode: u64,
    /// Directory entries as processes see them: path to inode.
    entries: BTreeMap<PathBuf, u64>,
    /// Directory entries as of the last sync of each directory.
    durable_entries: BTreeMap<PathBuf, u64>,
    dirs: std::collections::BTreeSet<PathBuf>,
    crashed: bool,
    /// Operations until the crash, if one is armed.
    countdown: Option<u64>,
    rng: u64,
    /// Operations done since the last reboot (to pick crash points).
    ops: u64,
    /// Files synced and directories synced, for reports.
    syncs: u64,
    eio: Option<Eio>,
}

impl Disk {
    fn next_random(&mut self) -> u64 {
        // SplitMix64, so a seed replays the same crash.
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Counts one operation; `Err` once the machine is off.
    fn step(&mut self) -> io::Result<()> {
        if self.crashed {
            return Err(io::Error::other("simulated power cut: the machine is off"));
        }
        self.ops += 1;
        if let Some(n) = self.countdown.as_mut() {
            if *n == 0 {
                self.cut();
                return Err(io::Error::other("simulated power cut"));
            }
            *n -= 1;
        }
        Ok(())
    }

    /// Counts one operation of kind `fault` against an armed `EIO`: `Err` if it fails.
    fn inject(&mut self, fault: Fault) -> io::Result<()> {
        let Some(eio) = self.eio.as_mut().filter(|e| e.fault == fault) else {
            return Ok(());
        };
        if eio.fired && eio.sticky || !eio.fired && eio.countdown == 0 {
            eio.fired = true;
            return Err(io::Error::from_raw_os_error(EIO));
        }
        if !eio.fired {
            eio.countdown -= 1;
        }
        Ok(())
    }

    /// The power cut: unsynced data and directory changes are lost. Unsynced appended bytes
    /// survive in part, sometimes as zeros (the size reached the disk, the data did not).
    fn cut(&mut self) {
        self.crashed = true;
        self.countdown = None;
        let live: std::collections::BTreeSet<u64> =
            self.durable_entries.values().copied().collect();
        let ids: Vec<u64> = self.inodes.keys().copied().collect();
        for id in ids {
            if !live.contains(&id) {
                self.inodes.remove(&id);
                continue;
            }
            let roll = self.next_random();
            let inode = self.inodes.get_mut(&id).expect("listed");
            let durable_len = inode.durable.len();
            let grew =
                inode.data.len() > durable_len && inode.data[..durable_len] == inode.durable[..];
            let mut after = inode.durable.clone();
            if grew {
                let extra = inode.data.len() - durable_len;
                let keep = (roll >> 8) as usize % (extra + 1);
                match roll % 4 {
                    // Nothing of the unsynced tail survives.
                    0 | 1 => {}
                    // A prefix of it does (a torn write).
                    2 => after.extend_from_slice(&inode.data[durable_len..durable_len + keep]),
                    // The file grew but its new blocks hold zeros.
                    _ => after.resize(durable_len + keep, 0),
                }
            }
            inode.data = after.clone();
            inode.durable = after;
            inode.lost = None;
        }
        self.entries = self.durable_entries.clone();
    }
}

/// `EIO`, the error a disk gives when it fails a read, write or sync.
const EIO: i32 = 5;

/// A simulated disk that loses what was not synced when the power goes (see the module docs).
#[derive(Clone, Default)]
pub struct FaultFs {
    disk: Arc<Mutex<Disk>>,
    ops_total: Arc<AtomicU64>,
}

impl std::fmt::Debug for FaultFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FaultFs")
    }
}

impl FaultFs {
    /// An empty disk; `seed` drives which unsynced bytes survive a cut.
    pub fn new(seed: u64) -> Self {
        let fs = Self::default();
        fs.disk.lock().expect("not poisoned").rng = seed;
        fs
    }

    fn disk(&self) -> std::sync::MutexGuard<'_, Disk> {
        self.disk.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Cuts the power after `ops` more operations.
    pub fn crash_after(&self, ops: u64) {
        self.disk().countdown = Some(ops);
    }

    /// Cuts the power now.
    pub fn crash(&self) {
        self.disk().cut();
    }

    /// Whether the power is off.
    pub fn crashed(&self) -> bool {
        self.disk().crashed
    }

    /// Powers the machine back on, with what survived (an armed `EIO` is disarmed: the
    /// failing disk was replaced by a good copy of it).
    pub fn reboot(&self) {
        let mut disk = self.disk();
        disk.crashed = false;
        disk.countdown = None;
        disk.ops = 0;
        disk.eio = None;
    }

    /// Fails the operation of kind `fault` after `ops` more of that kind succeed, with `EIO`;
    /// `sticky`: every one after it fails too, until [`FaultFs::reboot`] or
    /// [`FaultFs::heal`]. A failed append leaves part of its data; a failed sync drops the
    /// dirty data from the disk's view as Linux does (see the module docs).
    pub fn fail_after(&self, fault: Fault, ops: u64, sticky: bool) {
        self.disk().eio = Some(Eio {
            fault,
            countdown: ops,
            sticky,
            fired: false,
        });
    }

    /// Whether an armed `EIO` has failed an operation.
    pub fn failed(&self) -> bool {
        self.disk().eio.as_ref().is_some_and(|e| e.fired)
    }

    /// Disarms an injected `EIO` (the disk works again; what it lost stays lost).
    pub fn heal(&self) {
        self.disk().eio = None;
    }

    /// Operations since the last reboot.
    pub fn ops(&self) -> u64 {
        self.disk().ops
    }

    /// File and directory syncs so far.
    pub fn syncs(&self) -> u64 {
        self.disk().syncs
    }

    /// The bytes of `path` as a process sees them (for tests that damage files).
    pub fn read_file(&self, path: &Path) -> Option<Vec<u8>> {
        let disk = self.disk();
        let id = disk.entries.get(path)?;
        Some(disk.inodes[id].data.clone())
    }

    /// Replaces the bytes of `path`, durably (for tests that damage files).
    pub fn write_file(&self, path: &Path, bytes: &[u8]) {
        let mut disk = self.disk();
        let id = disk.entries[path];
        let inode = disk.inodes.get_mut(&id).expect("exists");
        inode.data = bytes.to_vec();
        inode.durable = bytes.to_vec();
        inode.lost = None;
    }

    fn inode_of(&self, path: &Path) -> io::Result<u64> {
        self.disk()
            .entries
            .get(path)
            .copied()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("{}", path.display())))
    }
}

struct FaultFile {
    fs: FaultFs,
    inode: u64,
}

impl FaultFile {
    /// Runs `f` on the file as one operation of kind `fault`; an injected `EIO` runs
    /// `failed` instead.
    fn with<T>(
        &self,
        fault: Fault,
        f: impl FnOnce(&mut Inode) -> T,
        failed: impl FnOnce(&mut Inode, u64),
    ) -> io::Result<T> {
        let mut disk = self.fs.disk();
        disk.step()?;
        let injected = disk.inject(fault);
        let roll = disk.next_random();
        let inode = disk
            .inodes
            .get_mut(&self.inode)
            .ok_or_else(|| io::Error::other("the file is gone"))?;
        match injected {
            Ok(()) => Ok(f(inode)),
            Err(e) => {
                failed(inode, roll);
                Err(e)
            }
        }
    }
}

impl VFile for FaultFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let mut disk = self.fs.disk();
        if disk.crashed {
            return Err(io::Error::other("simulated power cut: the machine is off"));
        }
        let inode = disk
            .inodes
            .get_mut(&self.inode)
            .ok_or_else(|| io::Error::other("the file is gone"))?;
        let start = (offset as usize).min(inode.data.len());
        let n = buf.len().min(inode.data.len() - start);
        buf[..n].copy_from_slice(&inode.data[start..start + n]);
        Ok(n)
    }
    fn append(&self, data: &[u8]) -> io::Result<()> {
        self.fs.ops_total.fetch_add(1, Ordering::Relaxed);
        self.with(
            Fault::Write,
            |inode| inode.data.extend_from_slice(data),
            // Part of the data may have gone in before the error.
            |inode, roll| {
                inode
                    .data
                    .extend_from_slice(&data[..roll as usize % data.len().max(1)])
            },
        )
    }
    fn sync(&self) -> io::Result<()> {
        self.with(Fault::Sync, Inode::sync, |inode, _| inode.fail_sync())?;
        self.fs.disk().syncs += 1;
        Ok(())
    }
    fn len(&self) -> io::Result<u64> {
        let disk = self.fs.disk();
        Ok(disk
            .inodes
            .get(&self.inode)
            .map_or(0, |i| i.data.len() as u64))
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.with(Fault::Write, |inode| inode.set_len(len as usize), |_, _| {})
    }
}

impl Vfs for FaultFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        // Directories themselves are taken as durable: the store's own files are what is
        // under test.
        self.disk().dirs.insert(dir.to_path_buf());
        Ok(())
    }
    fn dir_exists(&self, dir: &Path) -> bool {
        self.disk().dirs.contains(dir)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let disk = self.disk();
        if disk.crashed {
            return Err(io::Error::other("simulated power cut: the machine is off"));
        }
        Ok(disk
            .entries
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| Some(p.file_name()?.to_str()?.to_string()))
            .collect())
    }
    fn open_append(&self, path: &Path) -> io::Result<Arc<dyn VFile>> {
        let inode = match self.inode_of(path) {
            Ok(inode) => {
                self.disk().step()?;
                inode
            }
            Err(_) => return self.create(path),
        };
        Ok(Arc::new(FaultFile {
            fs: self.clone(),
            inode,
        }))
    }
    fn create(&self, path: &Path) -> io::Result<Arc<dyn VFile>> {
        let mut disk = self.disk();
        disk.step()?;
        disk.inject(Fault::Write)?;
        let id = disk.next_inode;
        disk.next_inode += 1;
        disk.inodes.insert(id, Inode::default());
        disk.entries.insert(path.to_path_buf(), id);
        drop(disk);
        Ok(Arc::new(FaultFile {
            fs: self.clone(),
            inode: id,
        }))
    }
    fn open_read(&self, path: &Path) -> io::Result<Arc<dyn VFile>> {
        let inode = self.inode_of(path)?;
        Ok(Arc::new(FaultFile {
            fs: self.clone(),
            inode,
        }))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut disk = self.disk();
        disk.step()?;
        disk.inject(Fault::Write)?;
        let id = disk.entries.remove(from).ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, format!("{}", from.display()))
        })?;
        disk.entries.insert(to.to_path_buf(), id);
        Ok(())
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut disk = self.disk();
        disk.step()?;
        disk.inject(Fault::Write)?;
        disk.entries
            .remove(path)
            .map(|_| ())
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("{}", path.display())))
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut disk = self.disk();
        disk.step()?;
        disk.inject(Fault::Sync)?;
        disk.syncs += 1;
        let in_dir = |p: &PathBuf| p.parent() == Some(dir);
        let current: Vec<(PathBuf, u64)> = disk
            .entries
            .iter()
            .filter(|(p, _)| in_dir(p))
            .map(|(p, i)| (p.clone(), *i))
            .collect();
        disk.durable_entries.retain(|p, _| !in_dir(p));
        disk.durable_entries.extend(current);
        Ok(())
    }
    fn lock(&self, _dir: &Path, _writing: bool) -> StoreResult<VLock> {
        Ok(Box::new(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_power_cut_keeps_only_synced_data_and_synced_directory_entries() {
        let fs = FaultFs::new(7);
        let dir = Path::new("/d");
        fs.create_dir_all(dir).unwrap();
        let a = fs.create(&dir.join("a")).unwrap();
        a.append(b"durable").unwrap();
        a.sync().unwrap();
        fs.sync_dir(dir).unwrap();
        a.append(b" lost").unwrap();
        let b = fs.create(&dir.join("b")).unwrap();
        b.append(b"synced, but its entry is not").unwrap();
        b.sync().unwrap();
        fs.rename(&dir.join("a"), &dir.join("c")).unwrap();
        fs.crash();
        assert!(a.append(b"x").is_err(), "the machine is off");
        fs.reboot();
        let mut names = fs.list(dir).unwrap();
        names.sort();
        assert_eq!(names, ["a"]);
        let data = fs.read_file(&dir.join("a")).unwrap();
        assert!(data.starts_with(b"durable") && data.len() <= b"durable lost".len());
        assert!(
            data == b"durable"
                || b"durable lost".starts_with(&data)
                || data[7..].iter().all(|&b| b == 0)
        );
    }

    #[test]
    fn a_failed_sync_loses_the_dirty_data_on_disk_even_after_a_later_sync_succeeds() {
        let fs = FaultFs::new(3);
        let dir = Path::new("/d");
        let path = dir.join("f");
        let f = fs.create(&path).unwrap();
        fs.sync_dir(dir).unwrap();
        f.append(b"synced ").unwrap();
        f.sync().unwrap();
        f.append(b"lost").unwrap();
        fs.fail_after(Fault::Sync, 0, false);
        assert_eq!(f.sync().unwrap_err().raw_os_error(), Some(EIO));
        assert!(fs.failed());
        f.append(b" later").unwrap();
        f.sync().unwrap();
        // Processes still read it; the disk has zeros there.
        assert_eq!(fs.read_file(&path).unwrap(), b"synced lost later");
        fs.crash();
        fs.reboot();
        assert_eq!(fs.read_file(&path).unwrap(), b"synced \0\0\0\0 later");
    }

    #[test]
    fn cutting_a_file_below_data_a_failed_sync_lost_makes_it_whole_again() {
        let fs = FaultFs::new(4);
        let dir = Path::new("/d");
        let path = dir.join("f");
        let f = fs.create(&path).unwrap();
        fs.sync_dir(dir).unwrap();
        f.append(b"kept").unwrap();
        f.sync().unwrap();
        f.append(b"lost").unwrap();
        fs.fail_after(Fault::Sync, 0, true);
        assert!(f.sync().is_err());
        assert!(f.sync().is_err(), "sticky");
        fs.heal();
        f.set_len(4).unwrap();
        f.append(b" again").unwrap();
        f.sync().unwrap();
        fs.crash();
        fs.reboot();
        assert_eq!(fs.read_file(&path).unwrap(), b"kept again");
    }

    #[test]
    fn an_injected_write_error_fails_one_write_and_may_leave_part_of_it() {
        let fs = FaultFs::new(5);
        let path = Path::new("/d/f");
        let f = fs.create(path).unwrap();
        fs.fail_after(Fault::Write, 1, false);
        f.append(b"one").unwrap();
        assert_eq!(f.append(b"two").unwrap_err().raw_os_error(), Some(EIO));
        f.append(b"three").unwrap();
        let data = fs.read_file(path).unwrap();
        assert!(data.starts_with(b"one") && data.ends_with(b"three"));
        assert!(
            data.len() < b"onetwothree".len(),
            "never the whole failed write"
        );
    }

    #[test]
    fn a_crash_can_be_armed_for_a_later_operation() {
        let fs = FaultFs::new(1);
        let dir = Path::new("/d");
        let f = fs.create(&dir.join("f")).unwrap();
        fs.crash_after(2);
        f.append(b"1").unwrap();
        f.append(b"2").unwrap();
        assert!(f.append(b"3").is_err());
        assert!(fs.crashed());
    }
}
