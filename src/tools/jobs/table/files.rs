//! A job's output window on disk: the ring file of each stream (see the table's module
//! doc, Output windows and Files), written by the watcher and read without tearing.

use super::*;

/// Size of a ring file's header (bytes): magic, window, start, total.
pub const HEADER_BYTES: u64 = crate::config::JOB_HEADER_BYTES;

pub(super) const MAGIC: &[u8; 8] = b"hnjob01\n";

/// Create `dir` 0700 (or narrow an existing one to it). A symbolic link or a non-directory
/// at its name is refused, never followed: the jobs dir and its scope dirs live in the
/// state dir, whose files are opened the same way ([`open_state_file`]).
pub(super) fn private_dir(dir: &Path) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)?;
    let meta = fs::symlink_metadata(dir)?;
    if !meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "is a symbolic link or not a directory, and handnode never follows one in its state dir",
        ));
    }
    if meta.permissions().mode() & 0o777 != DIR_MODE {
        fs::set_permissions(dir, fs::Permissions::from_mode(DIR_MODE))?;
    }
    Ok(())
}

/// The bytes of one stream read from a window.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Chunk {
    pub data: Vec<u8>,
    /// Absolute offset of `data[0]`.
    pub from: u64,
    /// Where the next read should start.
    pub next: u64,
    /// Bytes between the offset asked for and `from` that the window no longer holds.
    pub skipped: u64,
    /// Bytes written to the stream so far.
    pub total: u64,
}

/// One stream's ring file (see the module doc). One writer (the watcher), any readers.
#[derive(Debug)]
pub struct StreamFile {
    pub(super) file: File,
    pub(super) window: u64,
    /// Absolute offset where the file's bytes begin.
    pub(super) start: AtomicU64,
    /// Bytes written and readable.
    pub(super) total: AtomicU64,
    /// Bytes written or being written: what a reader must assume may be overwritten.
    pub(super) reserved: AtomicU64,
    pub(super) failed: AtomicBool,
}

impl StreamFile {
    pub(super) fn create(path: &Path, window: u64, start: u64) -> io::Result<StreamFile> {
        let file = open_state_file(
            OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(FILE_MODE),
            path,
        )?;
        let f = StreamFile {
            file,
            window: window.max(1),
            start: AtomicU64::new(start),
            total: AtomicU64::new(start),
            reserved: AtomicU64::new(start),
            failed: AtomicBool::new(false),
        };
        let mut head = [0u8; HEADER_BYTES as usize];
        head[..8].copy_from_slice(MAGIC);
        head[8..16].copy_from_slice(&f.window.to_le_bytes());
        head[16..24].copy_from_slice(&start.to_le_bytes());
        head[24..32].copy_from_slice(&start.to_le_bytes());
        f.file.write_all_at(&head, 0)?;
        Ok(f)
    }

    /// Open a ring file left by an earlier run (read only from now on).
    pub(super) fn open(path: &Path) -> io::Result<StreamFile> {
        let file = open_state_file(OpenOptions::new().read(true), path)?;
        let mut head = [0u8; HEADER_BYTES as usize];
        file.read_exact_at(&mut head, 0)?;
        let word = |i: usize| u64::from_le_bytes(head[i..i + 8].try_into().expect("8 bytes"));
        let (window, start, total) = (word(8), word(16), word(24));
        let len = file.metadata()?.len();
        if &head[..8] != MAGIC || window == 0 || start > total || len > HEADER_BYTES + window {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "not a job output file",
            ));
        }
        Ok(StreamFile {
            file,
            window,
            start: AtomicU64::new(start),
            total: AtomicU64::new(total),
            reserved: AtomicU64::new(total),
            failed: AtomicBool::new(false),
        })
    }

    pub fn total(&self) -> u64 {
        self.total.load(Ordering::SeqCst)
    }

    /// The first offset still held when `total` bytes were written.
    pub(super) fn begin(&self, total: u64) -> u64 {
        self.start
            .load(Ordering::SeqCst)
            .max(total.saturating_sub(self.window))
    }

    /// Bytes this stream holds on disk (its header included).
    pub fn disk_bytes(&self) -> u64 {
        let total = self.total();
        HEADER_BYTES + (total - self.begin(total))
    }

    pub(super) fn pos(&self, offset: u64) -> u64 {
        HEADER_BYTES + offset % self.window
    }

    /// Bytes of output this stream holds (its header not included).
    pub fn held(&self) -> u64 {
        let total = self.total();
        total - self.begin(total)
    }

    /// Append `bytes` (single writer). A failed write drops everything before it from
    /// the window, so a reader never sees bytes that are not what was written.
    pub fn write(&self, bytes: &[u8]) {
        self.write_within(bytes, u64::MAX);
    }

    /// Append `bytes`, keeping at most `limit` bytes of output after it (the job's share
    /// of the disk, [`Job`]'s `write`): the oldest are dropped first, as by a full window,
    /// and their blocks punched out of the file.
    pub fn write_within(&self, bytes: &[u8], limit: u64) {
        let t = self.total.load(Ordering::SeqCst);
        let len = bytes.len() as u64;
        let limit = limit.min(self.window);
        let end = t + len;
        let old_start = self.start.load(Ordering::SeqCst);
        let old_begin = self.begin(t);
        // Where the retained bytes begin after this write, within `limit`.
        let natural = old_start.max(end.saturating_sub(self.window));
        let new_start = if end - natural > limit {
            end - limit
        } else {
            old_start
        };
        if new_start != old_start {
            // Before any byte moves, so a reader's check after its read sees it.
            self.start.store(new_start, Ordering::SeqCst);
        }
        // Only the last `limit` bytes of a chunk can survive it.
        let keep = len.min(limit) as usize;
        let mut at = t + (len - keep as u64);
        let mut rest = &bytes[bytes.len() - keep..];
        self.reserved.store(t + len, Ordering::SeqCst);
        let mut result = Ok(());
        while !rest.is_empty() && result.is_ok() {
            let room = (self.window - at % self.window) as usize;
            let n = rest.len().min(room);
            result = self.file.write_all_at(&rest[..n], self.pos(at));
            at += n as u64;
            rest = &rest[n..];
        }
        if let Err(e) = result {
            self.start.store(t + len, Ordering::SeqCst);
            if !self.failed.swap(true, Ordering::SeqCst) {
                log::warn!("job output could not be written ({e}); its window restarts");
            }
        }
        let mut head = [0u8; 16];
        head[..8].copy_from_slice(&self.start.load(Ordering::SeqCst).to_le_bytes());
        head[8..].copy_from_slice(&(t + len).to_le_bytes());
        let _ = self.file.write_all_at(&head, 16);
        self.total.store(t + len, Ordering::SeqCst);
        // Give back the blocks of old bytes dropped by the limit whose positions no new
        // byte took (those at or after `end - window`; earlier ones were overwritten).
        let from = old_begin.max(end.saturating_sub(self.window));
        let to = new_start.min(t);
        if from < to {
            self.punch(from, to);
        }
    }

    /// Free the disk blocks of absolute offsets `[from, to)` (less than a window apart).
    pub(super) fn punch(&self, mut from: u64, to: u64) {
        use rustix::fs::FallocateFlags;
        while from < to {
            let room = (self.window - from % self.window).min(to - from);
            let done = rustix::fs::fallocate(
                &self.file,
                FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
                self.pos(from),
                room,
            );
            if let Err(e) = done {
                // The bytes are out of the window all the same; only the blocks stay.
                if !self.failed.swap(true, Ordering::SeqCst) {
                    log::warn!("job output: cannot free dropped bytes' blocks ({e})");
                }
                return;
            }
            from += room;
        }
    }

    /// At most `max` bytes from absolute `offset` (an offset past the end reads nothing).
    pub fn read(&self, offset: u64, max: usize) -> Chunk {
        let total = self.total();
        let begin = self.begin(total);
        let mut from = offset.max(begin);
        let mut skipped = begin.saturating_sub(offset);
        let to = total.min(from.saturating_add(max as u64));
        let mut data = Vec::new();
        if from < to {
            data = vec![0u8; (to - from) as usize];
            let mut at = from;
            let mut filled = 0;
            while at < to {
                let room = (self.window - at % self.window).min(to - at) as usize;
                let part = &mut data[filled..filled + room];
                if let Err(e) = self.file.read_exact_at(part, self.pos(at)) {
                    log::warn!("job output could not be read: {e}");
                    data.truncate(filled);
                    break;
                }
                at += room as u64;
                filled += room;
            }
            // The writer may have wrapped over the front of what was just read.
            let valid = self.begin(self.reserved.load(Ordering::SeqCst));
            if valid > from {
                let cut = (valid.min(from + data.len() as u64) - from) as usize;
                data.drain(..cut);
                skipped += cut as u64;
                from += cut as u64;
            }
        }
        Chunk {
            next: from + data.len() as u64,
            data,
            from,
            skipped,
            total,
        }
    }
}
