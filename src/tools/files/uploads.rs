//! Uploads in progress: the hidden part file of each `file_put` that has not reached
//! `final`, per scope (a grant, or the owner's `/mcp`), bounded per scope in bytes
//! (`--upload-bytes`) and in number, removed when the scope ends (and when the daemon
//! stops: an upload does not survive a restart, so neither does its part file).
//!
//! A part lives beside its target (same directory, so the final rename is atomic and never
//! crosses a file system) under a hidden name derived from the scope and the target's
//! name, and is reached through the descriptor of its directory opened when the upload
//! began: a later rename of a directory in the path, or a symlink swapped in, never
//! redirects a chunk, the rename or the cleanup.
//!
//! A chunk never waits for another: a part being written is taken out of the table, and a
//! second chunk of the same upload meanwhile is refused with a message, not queued.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::os::fd::OwnedFd;
use std::sync::Mutex;

use sha2::{Digest, Sha256};

/// Part files one scope may have at once.
pub const MAX_PARTS_PER_SCOPE: usize = 64;
/// Ended scopes remembered, so a call that raced its grant's end cannot start a new part.
const ENDED_KEPT: usize = 1024;

/// Which upload: the directory (device, inode) and the target's name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    pub dev: u64,
    pub ino: u64,
    pub name: String,
}

/// One part file.
#[derive(Debug)]
pub struct Part {
    /// The directory it (and its target) lie in.
    pub dir: OwnedFd,
    /// Its own (hidden) name in `dir`.
    pub part_name: String,
    pub file: File,
    /// Bytes written so far (the file's length).
    pub size: u64,
    /// SHA-256 of those bytes while they came in order; `None` after a rewrite, so the
    /// final check reads the file again. Boxed: it is most of a `Part`'s size.
    pub hasher: Option<Box<Sha256>>,
}

impl Part {
    /// Remove the part file.
    pub fn discard(self) {
        let _ = rustix::fs::unlinkat(&self.dir, &self.part_name, rustix::fs::AtFlags::empty());
    }
}

#[derive(Debug, Default)]
struct Slot {
    /// Bytes counted against the scope's bound (the part's size, or what a chunk being
    /// written will make it).
    reserved: u64,
    /// `None` while a chunk is being written.
    part: Option<Part>,
}

#[derive(Debug, Default)]
struct Scope {
    used: u64,
    parts: HashMap<Key, Slot>,
}

#[derive(Debug, Default)]
struct Inner {
    scopes: HashMap<String, Scope>,
    ended: VecDeque<String>,
}

/// Every part file of the daemon.
#[derive(Debug)]
pub struct Uploads {
    /// Bytes of part files one scope may hold (`--upload-bytes`).
    pub bound: u64,
    inner: Mutex<Inner>,
}

/// What [`Uploads::take`] hands a chunk: the part to write (if the upload exists) to be
/// given back with [`Uploads::give_back`] or [`Uploads::finish`].
pub struct Taken {
    pub part: Option<Part>,
}

impl Uploads {
    pub fn new(bound: u64) -> Uploads {
        Uploads {
            bound,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reserve room for a chunk that makes the upload `new_size` bytes long and take its
    /// part out of the table (`None` if the upload has not begun: the caller creates it).
    /// Refused, changing nothing, when the scope has ended, another chunk of this upload
    /// is being written, the scope's parts would pass the bound, or too many are open.
    pub fn take(&self, scope: &str, key: &Key, new_size: u64) -> Result<Taken, String> {
        let bound = self.bound;
        let mut inner = self.lock();
        if inner.ended.iter().any(|s| s == scope) {
            return Err("this grant has ended".into());
        }
        let sc = inner.scopes.entry(scope.to_string()).or_default();
        let old = match sc.parts.get(key) {
            Some(slot) if slot.part.is_none() => {
                return Err(
                    "another chunk of this upload is being written; send its chunks one at a time"
                        .into(),
                )
            }
            Some(slot) => slot.reserved,
            None if sc.parts.len() >= MAX_PARTS_PER_SCOPE => {
                return Err(format!(
                    "this grant has {MAX_PARTS_PER_SCOPE} unfinished uploads; finish one (final: true) first"
                ))
            }
            None => 0,
        };
        let after = sc.used - old + new_size;
        if after > bound {
            return Err(format!(
                "this chunk would bring the grant's unfinished uploads to {after} bytes, past \
                 the {bound} allowed (--upload-bytes); nothing was written"
            ));
        }
        sc.used = after;
        let slot = sc.parts.entry(key.clone()).or_default();
        slot.reserved = new_size;
        Ok(Taken {
            part: slot.part.take(),
        })
    }

    /// Put a part back after a chunk (its real size counted), or drop the slot when the
    /// chunk created nothing. If the scope ended meanwhile the part file is removed.
    pub fn give_back(&self, scope: &str, key: &Key, part: Option<Part>) {
        let mut inner = self.lock();
        let Some(sc) = inner.scopes.get_mut(scope) else {
            if let Some(p) = part {
                p.discard();
            }
            return;
        };
        let Some(slot) = sc.parts.get_mut(key) else {
            if let Some(p) = part {
                p.discard();
            }
            return;
        };
        sc.used -= slot.reserved;
        match part {
            Some(p) => {
                slot.reserved = p.size;
                sc.used += p.size;
                slot.part = Some(p);
            }
            None => {
                sc.parts.remove(key);
            }
        }
    }

    /// The upload is over (renamed into place, or dropped): forget its slot.
    pub fn finish(&self, scope: &str, key: &Key) {
        self.give_back(scope, key, None);
    }

    /// Bytes of part files `scope` holds now.
    pub fn used(&self, scope: &str) -> u64 {
        self.lock().scopes.get(scope).map_or(0, |s| s.used)
    }

    /// Part files `scope` holds now.
    pub fn count(&self, scope: &str) -> usize {
        self.lock().scopes.get(scope).map_or(0, |s| s.parts.len())
    }

    /// The scope ended (its grant ended): remove its part files; a chunk being written
    /// removes its own when it finds the scope gone.
    pub fn end_scope(&self, scope: &str) {
        let parts: Vec<Part> = {
            let mut inner = self.lock();
            if !inner.ended.iter().any(|s| s == scope) {
                inner.ended.push_back(scope.to_string());
                if inner.ended.len() > ENDED_KEPT {
                    inner.ended.pop_front();
                }
            }
            match inner.scopes.remove(scope) {
                Some(sc) => sc.parts.into_values().filter_map(|s| s.part).collect(),
                None => Vec::new(),
            }
        };
        for p in parts {
            p.discard();
        }
    }
}

impl Drop for Uploads {
    /// The daemon stops: an upload cannot continue after a restart (this table is gone),
    /// so its part file goes now rather than lingering.
    fn drop(&mut self) {
        let inner = std::mem::take(&mut *self.lock());
        for sc in inner.scopes.into_values() {
            for slot in sc.parts.into_values() {
                if let Some(p) = slot.part {
                    p.discard();
                }
            }
        }
    }
}

/// The hidden name of `scope`'s part file for the target `name`: a dot, the start of the
/// name (for whoever lists the directory), and a hash of scope and name (so two grants,
/// or two long names, never share one). Always within `NAME_MAX`.
pub fn part_name(scope: &str, name: &str) -> String {
    let mut h = Sha256::new();
    h.update(scope.as_bytes());
    h.update([0]);
    h.update(name.as_bytes());
    let digest = h.finalize();
    let mut end = name.len().min(100);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    let tag: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!(".{}.{tag}.handnode-part", &name[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> Key {
        Key {
            dev: 1,
            ino: 2,
            name: name.into(),
        }
    }

    #[test]
    fn the_bound_holds_at_the_bound_and_refuses_one_past_it() {
        let up = Uploads::new(100);
        let t = up.take("g", &key("a"), 100).unwrap();
        assert!(t.part.is_none());
        up.finish("g", &key("a"));
        assert_eq!(up.used("g"), 0);
        let err = up.take("g", &key("a"), 101).err().unwrap();
        assert!(err.contains("past the 100 allowed"), "{err}");
        assert_eq!(up.used("g"), 0, "a refused chunk reserves nothing");
        assert_eq!(up.count("g"), 0);
    }

    #[test]
    fn a_busy_upload_refuses_a_second_chunk_and_ended_scopes_refuse_all() {
        let up = Uploads::new(100);
        let _t = up.take("g", &key("a"), 10).unwrap();
        // The slot exists with no part: a second chunk is refused at once.
        assert!(up
            .take("g", &key("a"), 20)
            .err()
            .unwrap()
            .contains("one at a time"));
        up.end_scope("g");
        assert!(up.take("g", &key("b"), 1).err().unwrap().contains("ended"));
        assert_eq!(up.count("g"), 0);
    }

    #[test]
    fn part_names_are_hidden_short_and_distinct_per_scope() {
        let a = part_name("g1", "x.bin");
        assert!(
            a.starts_with(".x.bin.") && a.ends_with(".handnode-part"),
            "{a}"
        );
        assert_ne!(a, part_name("g2", "x.bin"));
        let long = "é".repeat(120);
        assert!(part_name("g", &long).len() < 255);
    }
}
