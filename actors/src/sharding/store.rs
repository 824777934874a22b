//! Remembered entities: which entity ids of a shard were running, so that
//! they start again when their shard starts on another node (or after a
//! restart). Off unless [`ShardingSettings::remember_entities`] names a
//! store.
//!
//! [`ShardingSettings::remember_entities`]: super::ShardingSettings::remember_entities

use std::{
    collections::{BTreeSet, HashMap},
    fmt,
    fs::{File, OpenOptions},
    io::{self, BufRead, BufReader, Write},
    path::{Path, PathBuf},
    sync::{Mutex, PoisonError},
};

/// Why a store failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// Reading or writing the store's file failed.
    #[error("entity store io: {0}")]
    Io(#[from] io::Error),
    /// The id cannot be stored (a line break in an id, for
    /// [`FileEntityStore`]); the entity runs, but is not remembered.
    #[error("entity id {0:?} cannot be stored")]
    BadId(String),
}

/// Where remembered entity ids live, per type and shard. Every node of a
/// type must see the same store (a database, a shared volume): the node
/// that takes a shard over reads what the previous one wrote.
///
/// Calls run on the region's task: keep them short (a local file, a
/// fast database), or the region's messages wait.
pub trait EntityStore: Send + Sync + 'static {
    /// Entity `id` of `shard` started.
    ///
    /// # Errors
    /// The store could not record it; the entity runs all the same.
    fn add(&self, type_name: &str, shard: u32, id: &str) -> Result<(), StoreError>;
    /// Entity `id` of `shard` passivated itself: forget it.
    ///
    /// # Errors
    /// The store could not record it.
    fn remove(&self, type_name: &str, shard: u32, id: &str) -> Result<(), StoreError>;
    /// The ids remembered for `shard`.
    ///
    /// # Errors
    /// The store could not be read.
    fn list(&self, type_name: &str, shard: u32) -> Result<Vec<String>, StoreError>;
}

type Table = HashMap<(String, u32), BTreeSet<String>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A store in memory: for tests, and for nodes of one process sharing
/// one `Arc` of it. Lost with the process.
#[derive(Debug, Default)]
pub struct MemoryEntityStore {
    table: Mutex<Table>,
}

impl MemoryEntityStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

impl EntityStore for MemoryEntityStore {
    fn add(&self, type_name: &str, shard: u32, id: &str) -> Result<(), StoreError> {
        lock(&self.table)
            .entry((type_name.to_owned(), shard))
            .or_default()
            .insert(id.to_owned());
        Ok(())
    }

    fn remove(&self, type_name: &str, shard: u32, id: &str) -> Result<(), StoreError> {
        if let Some(ids) = lock(&self.table).get_mut(&(type_name.to_owned(), shard)) {
            ids.remove(id);
        }
        Ok(())
    }

    fn list(&self, type_name: &str, shard: u32) -> Result<Vec<String>, StoreError> {
        Ok(lock(&self.table)
            .get(&(type_name.to_owned(), shard))
            .map(|ids| ids.iter().cloned().collect())
            .unwrap_or_default())
    }
}

/// A store in a directory: one append-only file per type
/// (`{dir}/{type}.entities`), a line per change (`+ {shard} {id}` or
/// `- {shard} {id}`), read whole by [`list`](EntityStore::list).
///
/// Crash behaviour: each change is one `write` of a whole line, not
/// synced to disk. A crash of the process loses nothing written; a crash
/// of the machine can lose the last changes, and a torn last line (no
/// line break) is ignored when read and cut off before the next write. Ids with a line break are refused
/// ([`StoreError::BadId`]). The file only grows: a type with many
/// short-lived entities should use a database instead.
pub struct FileEntityStore {
    dir: PathBuf,
    /// Serializes appends from the regions of one process.
    files: Mutex<HashMap<String, File>>,
}

impl fmt::Debug for FileEntityStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileEntityStore")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl FileEntityStore {
    /// A store in `dir` (created if missing).
    ///
    /// # Errors
    /// The directory cannot be created.
    pub fn new(dir: impl AsRef<Path>) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir.as_ref())?;
        Ok(Self {
            dir: dir.as_ref().to_owned(),
            files: Mutex::new(HashMap::new()),
        })
    }

    fn path(&self, type_name: &str) -> PathBuf {
        let safe: String = type_name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        self.dir.join(format!("{safe}.entities"))
    }

    fn append(&self, type_name: &str, op: char, shard: u32, id: &str) -> Result<(), StoreError> {
        if id.contains(['\n', '\r']) {
            return Err(StoreError::BadId(id.to_owned()));
        }
        let mut files = lock(&self.files);
        let file = match files.get_mut(type_name) {
            Some(f) => f,
            None => {
                let path = self.path(type_name);
                let f = OpenOptions::new().create(true).append(true).open(&path)?;
                // A torn last line (a crash mid-write) is cut off, so that
                // the next change starts a line of its own.
                let bytes = std::fs::read(&path)?;
                if bytes.last().is_some_and(|b| *b != b'\n') {
                    let keep = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
                    f.set_len(keep as u64)?;
                }
                files.entry(type_name.to_owned()).or_insert(f)
            }
        };
        file.write_all(format!("{op} {shard} {id}\n").as_bytes())?;
        Ok(())
    }
}

impl EntityStore for FileEntityStore {
    fn add(&self, type_name: &str, shard: u32, id: &str) -> Result<(), StoreError> {
        self.append(type_name, '+', shard, id)
    }

    fn remove(&self, type_name: &str, shard: u32, id: &str) -> Result<(), StoreError> {
        self.append(type_name, '-', shard, id)
    }

    fn list(&self, type_name: &str, shard: u32) -> Result<Vec<String>, StoreError> {
        let file = match File::open(self.path(type_name)) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        let mut ids = BTreeSet::new();
        let mut reader = BufReader::new(file);
        let mut line = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line)? == 0 {
                break;
            }
            // A torn last line (a crash mid-write) has no line break.
            let Some(entry) = line.strip_suffix('\n') else {
                break;
            };
            let mut parts = entry.splitn(3, ' ');
            let (Some(op), Some(s), Some(id)) = (parts.next(), parts.next(), parts.next()) else {
                continue;
            };
            if s.parse::<u32>().ok() != Some(shard) {
                continue;
            }
            match op {
                "+" => ids.insert(id.to_owned()),
                "-" => ids.remove(id),
                _ => false,
            };
        }
        Ok(ids.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(store: &dyn EntityStore) {
        store.add("Cart", 1, "a").unwrap();
        store.add("Cart", 1, "b c").unwrap();
        store.add("Cart", 2, "z").unwrap();
        store.add("Other", 1, "o").unwrap();
        store.remove("Cart", 1, "a").unwrap();
        assert_eq!(store.list("Cart", 1).unwrap(), ["b c"]);
        assert_eq!(store.list("Cart", 2).unwrap(), ["z"]);
        assert_eq!(store.list("Cart", 3).unwrap(), Vec::<String>::new());
    }

    #[test]
    fn memory_store_adds_removes_lists() {
        check(&MemoryEntityStore::new());
    }

    #[test]
    fn file_store_replays_its_log_and_ignores_a_torn_line() {
        let dir = std::env::temp_dir().join(format!(
            "actors-entity-store-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let store = FileEntityStore::new(&dir).unwrap();
        check(&store);
        assert!(matches!(
            store.add("Cart", 1, "x\ny"),
            Err(StoreError::BadId(_))
        ));
        // A crash mid-write leaves a line without its break: ignored.
        drop(store);
        let mut f = OpenOptions::new()
            .append(true)
            .open(dir.join("Cart.entities"))
            .unwrap();
        f.write_all(b"+ 1 torn").unwrap();
        let again = FileEntityStore::new(&dir).unwrap();
        assert_eq!(again.list("Cart", 1).unwrap(), ["b c"]);
        // Writing again after it starts a fresh line.
        again.add("Cart", 1, "d").unwrap();
        assert_eq!(again.list("Cart", 1).unwrap(), ["b c", "d"]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
