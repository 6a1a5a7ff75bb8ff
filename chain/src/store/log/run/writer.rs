//! Writing a sorted run: entries in key order, cut into blocks, then the sparse index, the
//! bloom filter and the footer (the layout is in [`super`]).

use std::io::{self, Write};
use std::sync::Arc;

use crate::block::BlockHeader;
use crate::store::log::vfs::{FileWriter, VFile};

use super::bloom::{BloomBuilder, bloom_hash};
use super::{BLOCK_BYTES, END_MAGIC, HEADER_LEN, MAGIC, VERSION};

/// Writes a run, entries in strictly increasing key order.
pub struct RunWriter {
    out: FileWriter,
    header: Vec<u8>,
    block: Vec<u8>,
    block_first: Vec<u8>,
    index: Vec<(Vec<u8>, u64, u32)>,
    /// The filter, when the number of entries was known up front; else `hashes` collects
    /// the key hashes until `finish` knows how large to make it.
    bloom: Option<BloomBuilder>,
    hashes: Vec<u64>,
    last_key: Option<Vec<u8>>,
    entries: u64,
}

impl RunWriter {
    /// Starts a run of at most `entries` entries, of the state at `head`, in `file` (empty):
    /// its filter is built as entries come, so no key hash is kept (8 bytes a key).
    pub fn with_entries(
        file: Arc<dyn VFile>,
        head: &BlockHeader,
        entries: u64,
    ) -> io::Result<Self> {
        let mut writer = Self::new(file, head)?;
        writer.bloom = Some(BloomBuilder::new(entries));
        Ok(writer)
    }

    /// Starts a run of the state at `head` in `file` (empty).
    pub fn new(file: Arc<dyn VFile>, head: &BlockHeader) -> io::Result<Self> {
        let mut out = FileWriter::new(file);
        let mut header = MAGIC.to_vec();
        header.extend_from_slice(&VERSION.to_le_bytes());
        borsh::BorshSerialize::serialize(head, &mut header)?;
        debug_assert_eq!(header.len() as u64, HEADER_LEN);
        out.write_all(&header)?;
        Ok(Self {
            out,
            header,
            block: Vec::with_capacity(2 * BLOCK_BYTES),
            block_first: Vec::new(),
            index: Vec::new(),
            bloom: None,
            hashes: Vec::new(),
            last_key: None,
            entries: 0,
        })
    }

    /// Adds an entry; keys must come in increasing order.
    pub fn add(&mut self, key: &[u8], value: &[u8]) -> io::Result<()> {
        if let Some(last) = &self.last_key
            && last.as_slice() >= key
        {
            // A caller's bug (a change source out of order), refused rather than written.
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "run keys must increase",
            ));
        }
        if self.block.is_empty() {
            self.block_first.clear();
            self.block_first.extend_from_slice(key);
        }
        self.block
            .extend_from_slice(&(key.len() as u32).to_le_bytes());
        self.block
            .extend_from_slice(&(value.len() as u32).to_le_bytes());
        self.block.extend_from_slice(key);
        self.block.extend_from_slice(value);
        match &mut self.bloom {
            Some(bloom) => bloom.add(bloom_hash(key)),
            None => self.hashes.push(bloom_hash(key)),
        }
        match &mut self.last_key {
            Some(last) => {
                last.clear();
                last.extend_from_slice(key);
            }
            None => self.last_key = Some(key.to_vec()),
        }
        self.entries += 1;
        if self.block.len() >= BLOCK_BYTES {
            self.flush_block()?;
        }
        Ok(())
    }

    fn flush_block(&mut self) -> io::Result<()> {
        if self.block.is_empty() {
            return Ok(());
        }
        let offset = self.out.written;
        self.out
            .write_all(&(self.block.len() as u32).to_le_bytes())?;
        self.out
            .write_all(&crc32fast::hash(&self.block).to_le_bytes())?;
        self.out.write_all(&self.block)?;
        self.index.push((
            std::mem::take(&mut self.block_first),
            offset,
            self.block.len() as u32 + 8,
        ));
        self.block.clear();
        Ok(())
    }

    /// Writes the index, filter and footer; returns the file (not yet synced) and its size.
    pub fn finish(mut self) -> io::Result<(Arc<dyn VFile>, u64)> {
        self.flush_block()?;
        let mut meta = Vec::new();
        meta.extend_from_slice(&(self.index.len() as u32).to_le_bytes());
        for (key, offset, len) in &self.index {
            meta.extend_from_slice(&(key.len() as u32).to_le_bytes());
            meta.extend_from_slice(key);
            meta.extend_from_slice(&offset.to_le_bytes());
            meta.extend_from_slice(&len.to_le_bytes());
        }
        let bloom = match self.bloom.take() {
            Some(builder) => builder.finish(),
            None => {
                let mut builder = BloomBuilder::new(self.entries);
                for &h in &self.hashes {
                    builder.add(h);
                }
                builder.finish()
            }
        };
        meta.extend_from_slice(&bloom.layout.hashes.to_le_bytes());
        meta.extend_from_slice(&bloom.layout.nbits.to_le_bytes());
        meta.extend_from_slice(&bloom.bits);
        let meta_offset = self.out.written;
        self.out.write_all(&meta)?;
        self.out.write_all(&meta_offset.to_le_bytes())?;
        self.out.write_all(&(meta.len() as u64).to_le_bytes())?;
        self.out.write_all(&self.entries.to_le_bytes())?;
        let mut crc = crc32fast::Hasher::new();
        crc.update(&self.header);
        crc.update(&meta);
        self.out.write_all(&crc.finalize().to_le_bytes())?;
        self.out.write_all(END_MAGIC)?;
        let size = self.out.written;
        Ok((self.out.finish()?, size))
    }
}
