//! The file operations the log store makes, as a trait, and the operating system's file system
//! behind it ([`RealFs`]); tests use a simulated disk instead ([`super::fault::FaultFs`]).
//! Also [`FileWriter`], which appends to a file in large chunks.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use crate::store::error::StoreResult;
use crate::store::lock::DirLock;

/// An open file.
pub trait VFile: Send + Sync {
    /// Reads up to `buf.len()` bytes at `offset`; returns how many (0 at the end).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// Appends `data` at the end.
    fn append(&self, data: &[u8]) -> io::Result<()>;
    /// Makes the file's data durable (`fdatasync`).
    fn sync(&self) -> io::Result<()>;
    /// Its length.
    fn len(&self) -> io::Result<u64>;
    /// Whether it is empty.
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
    /// Cuts (or extends with zeros) the file to `len` bytes.
    fn set_len(&self, len: u64) -> io::Result<()>;

    /// Fills `buf` from `offset`, or fails with `UnexpectedEof`.
    fn read_exact_at(&self, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match self.read_at(buf, offset)? {
                0 => return Err(io::ErrorKind::UnexpectedEof.into()),
                n => {
                    buf = &mut buf[n..];
                    offset += n as u64;
                }
            }
        }
        Ok(())
    }
}

/// A held store lock.
pub type VLock = Box<dyn Send + Sync>;

/// The file operations of a store. Paths are files inside one store directory.
pub trait Vfs: Send + Sync {
    /// Creates `dir` and its parents, syncing each new directory's parent.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Whether `dir` exists.
    fn dir_exists(&self, dir: &Path) -> bool;
    /// The names of the files in `dir`.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Opens `path` to append to, creating it (empty) if missing.
    fn open_append(&self, path: &Path) -> io::Result<Arc<dyn VFile>>;
    /// Creates `path` empty, replacing any file there.
    fn create(&self, path: &Path) -> io::Result<Arc<dyn VFile>>;
    /// Opens `path` to read.
    fn open_read(&self, path: &Path) -> io::Result<Arc<dyn VFile>>;
    /// Renames `from` to `to`, replacing `to`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes the file `path`.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Makes the entries of `dir` durable: creations, renames and removals in it.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Takes the store lock of `dir` ([`DirLock`]).
    fn lock(&self, dir: &Path, writing: bool) -> StoreResult<VLock>;
}

/// The operating system's file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealFs;

struct RealFile(File);

impl VFile for RealFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.0.read_at(buf, offset)
    }
    fn append(&self, data: &[u8]) -> io::Result<()> {
        // Opened with O_APPEND: each write goes to the end.
        (&self.0).write_all_append(data)
    }
    fn sync(&self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
}

/// `write_all` through a shared reference (a `File` is `Write` by `&File`).
trait WriteAllAppend {
    fn write_all_append(self, data: &[u8]) -> io::Result<()>;
}

impl WriteAllAppend for &File {
    fn write_all_append(mut self, data: &[u8]) -> io::Result<()> {
        io::Write::write_all(&mut self, data)
    }
}

impl Vfs for RealFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        if dir.is_dir() {
            return Ok(());
        }
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            self.create_dir_all(parent)?;
            fs::create_dir(dir).or_else(|e| {
                if e.kind() == io::ErrorKind::AlreadyExists {
                    Ok(())
                } else {
                    Err(e)
                }
            })?;
            // The new directory's entry lives in its parent.
            return self.sync_dir(parent);
        }
        fs::create_dir_all(dir)
    }
    fn dir_exists(&self, dir: &Path) -> bool {
        dir.is_dir()
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(dir)? {
            if let Some(name) = entry?.file_name().to_str() {
                names.push(name.to_string());
            }
        }
        Ok(names)
    }
    fn open_append(&self, path: &Path) -> io::Result<Arc<dyn VFile>> {
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)?;
        Ok(Arc::new(RealFile(file)))
    }
    fn create(&self, path: &Path) -> io::Result<Arc<dyn VFile>> {
        // Empty it first, then open it to append: every write goes to the end, even after a
        // `set_len` (O_APPEND cannot be combined with O_TRUNC).
        OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        self.open_append(path)
    }
    fn open_read(&self, path: &Path) -> io::Result<Arc<dyn VFile>> {
        Ok(Arc::new(RealFile(File::open(path)?)))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
    fn lock(&self, dir: &Path, writing: bool) -> StoreResult<VLock> {
        Ok(Box::new(if writing {
            DirLock::exclusive(dir)?
        } else {
            DirLock::shared(dir)?
        }))
    }
}

/// A `Write` that appends to a [`VFile`] in large chunks and counts and checksums.
pub struct FileWriter {
    file: Arc<dyn VFile>,
    buf: Vec<u8>,
    /// Bytes written so far (buffered included).
    pub written: u64,
}

impl FileWriter {
    /// A writer appending to `file`.
    pub fn new(file: Arc<dyn VFile>) -> Self {
        Self {
            file,
            buf: Vec::with_capacity(WRITE_CHUNK),
            written: 0,
        }
    }
    /// Flushes and returns the file.
    pub fn finish(mut self) -> io::Result<Arc<dyn VFile>> {
        self.flush()?;
        Ok(self.file)
    }
}

/// Bytes a [`FileWriter`] buffers before it appends them.
const WRITE_CHUNK: usize = 1 << 20;

impl Write for FileWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if data.len() >= WRITE_CHUNK {
            // As `BufWriter` does: a write as large as the buffer goes to the file as it is,
            // after what is buffered (a block record, encoded whole, is one such write).
            self.flush()?;
            self.file.append(data)?;
            self.written += data.len() as u64;
            return Ok(data.len());
        }
        self.buf.extend_from_slice(data);
        self.written += data.len() as u64;
        if self.buf.len() >= WRITE_CHUNK {
            self.flush()?;
        }
        Ok(data.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        if !self.buf.is_empty() {
            self.file.append(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }
}
