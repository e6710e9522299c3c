//! [`Recorder`]: a capture file written off the caller's thread, bounded in size.
//!
//! The caller's thread only encodes: each datagram becomes an enhanced packet block
//! appended to a batch buffer (one copy of the datagram, its IP and UDP checksums). Full
//! batches go to a writer thread through a queue of [`QUEUE`] batches; the thread writes
//! them and hands the emptied buffers back, so after the first few batches nothing is
//! allocated. Nothing ever waits on the disk: when the queue is full (the disk is slower
//! than the traffic) the batch is dropped and its datagrams counted, and once the file
//! would pass its size limit every further datagram is counted and dropped. The file is
//! always a valid capture, ending at a whole block.

use std::fs::File;
use std::io::{self, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::pcapng::{self, Datagram, Direction};

/// Bytes a batch collects before it goes to the writer thread.
pub const BATCH: usize = 64 * 1024;
/// Batches waiting for the writer thread at most; past that a batch is dropped.
pub const QUEUE: usize = 8;
/// The longest a datagram waits in a batch before the batch goes to the writer: a
/// capture of a quiet connection still reaches the disk, and a crash loses little.
pub const BATCH_AGE: Duration = Duration::from_millis(200);
/// The size limit of [`Recorder::from_env`]'s file when `POROUS_CAPTURE_LIMIT` does not
/// say: 256 MiB.
pub const DEFAULT_LIMIT: u64 = 256 * 1024 * 1024;

/// What a [`Recorder`] did so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecorderStats {
    /// Datagrams encoded into the capture.
    pub recorded: u64,
    /// Datagrams left out: past the size limit, behind a writer that could not keep up,
    /// after a write error, or not framable (see [`FrameError`](crate::FrameError)).
    pub dropped: u64,
    /// Bytes of the capture so far, headers included (what reaches the file unless
    /// batches are dropped later).
    pub bytes: u64,
    /// The writer thread met an error (the disk full, the file gone): nothing more is
    /// recorded.
    pub failed: bool,
}

/// A pcapng capture file that records datagrams sent and received, written by a
/// thread of its own. Clones share one file; the file is complete once the last clone is
/// dropped (which waits for the writer).
///
/// The caller's thread only encodes: each datagram becomes an enhanced packet block in a
/// batch buffer (one copy of the datagram, its IP and UDP checksums). A batch goes to
/// the writer thread when it holds [`BATCH`] bytes or its first datagram is [`BATCH_AGE`]
/// old, through a queue of [`QUEUE`] batches; emptied buffers come back, so after the
/// first few batches nothing is allocated. Nothing waits on the disk: a batch that finds
/// the queue full is dropped and its datagrams counted ([`RecorderStats::dropped`]), and
/// once the file would pass its size limit every further datagram is. The file always
/// ends at a whole block.
///
/// ```no_run
/// use porous_pcap::{Direction, Recorder};
///
/// let capture = Recorder::create("run.pcapng", 64 << 20)?;
/// let (me, peer) = ("127.0.0.1:7000".parse()?, "127.0.0.1:7001".parse()?);
/// capture.record(Direction::Outbound, me, peer, b"\x40\x2a...");
/// drop(capture); // the file is complete
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct Recorder {
    shared: Arc<Mutex<Shared>>,
    path: Arc<PathBuf>,
}

#[derive(Debug)]
struct Shared {
    batch: Vec<u8>,
    /// Datagrams in `batch`, and when its first was recorded.
    in_batch: u64,
    batch_since: Option<SystemTime>,
    to_writer: Option<SyncSender<(Vec<u8>, u64)>>,
    spare: Receiver<Vec<u8>>,
    failed: Arc<AtomicBool>,
    /// Datagrams the writer dropped (a batch it could not write), shared with it.
    writer_dropped: Arc<Mutex<u64>>,
    ip_id: u16,
    limit: u64,
    stats: RecorderStats,
    writer: Option<JoinHandle<()>>,
}

impl Recorder {
    /// Creates (or truncates) the capture file at `path`, to hold at most `limit` bytes,
    /// and starts its writer thread. Datagrams are recorded on one interface named after
    /// the file.
    pub fn create(path: impl AsRef<Path>, limit: u64) -> io::Result<Self> {
        let path = path.as_ref().to_path_buf();
        let mut file = File::create(&path)?;
        let mut head = Vec::new();
        pcapng::section_header(&mut head, concat!("porous-pcap ", env!("CARGO_PKG_VERSION")));
        pcapng::interface(&mut head, "porous", "UDP datagrams of POROUS sockets, as each socket sent or received them");
        file.write_all(&head)?;
        let (to_writer, batches) = mpsc::sync_channel::<(Vec<u8>, u64)>(QUEUE);
        let (give_back, spare) = mpsc::channel();
        let failed = Arc::new(AtomicBool::new(false));
        let writer_dropped = Arc::new(Mutex::new(0));
        let writer = {
            let (failed, dropped) = (Arc::clone(&failed), Arc::clone(&writer_dropped));
            std::thread::Builder::new().name("porous-capture".into()).spawn(move || {
                for (mut batch, count) in batches {
                    if failed.load(Ordering::Relaxed) || file.write_all(&batch).is_err() {
                        failed.store(true, Ordering::Relaxed);
                        *dropped.lock().unwrap_or_else(PoisonError::into_inner) += count;
                    }
                    batch.clear();
                    // The recorder may be gone already: the buffer is then freed here.
                    let _ = give_back.send(batch);
                }
                if file.flush().is_err() {
                    failed.store(true, Ordering::Relaxed);
                }
            })?
        };
        let stats = RecorderStats { bytes: head.len() as u64, ..RecorderStats::default() };
        let shared = Shared {
            batch: Vec::with_capacity(BATCH + 2048),
            in_batch: 0,
            batch_since: None,
            to_writer: Some(to_writer),
            spare,
            failed,
            writer_dropped,
            ip_id: 0,
            limit,
            stats,
            writer: Some(writer),
        };
        Ok(Self { shared: Arc::new(Mutex::new(shared)), path: Arc::new(path) })
    }

    /// The recorder the environment asks for: `POROUS_CAPTURE` names the file (unset or
    /// empty: none), `POROUS_CAPTURE_LIMIT` its size limit in bytes ([`DEFAULT_LIMIT`]
    /// unless set). Every call in a process while a recorder it made is alive returns that
    /// same recorder, so all the sockets of a process share one capture file.
    pub fn from_env() -> io::Result<Option<Self>> {
        /// The file the environment named, and the recorder writing it while one lives.
        type Open = Option<(PathBuf, std::sync::Weak<Mutex<Shared>>, Arc<PathBuf>)>;
        static OPEN: Mutex<Open> = Mutex::new(None);
        let Some(path) = std::env::var_os("POROUS_CAPTURE").filter(|p| !p.is_empty()) else { return Ok(None) };
        let path = PathBuf::from(path);
        let mut open = OPEN.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((p, shared, name)) = open.as_ref()
            && *p == path
            && let Some(shared) = shared.upgrade()
        {
            return Ok(Some(Self { shared, path: Arc::clone(name) }));
        }
        let limit = match std::env::var("POROUS_CAPTURE_LIMIT") {
            Ok(v) => v.trim().parse().map_err(|_| {
                io::Error::new(io::ErrorKind::InvalidInput, format!("POROUS_CAPTURE_LIMIT={v:?} is not a byte count"))
            })?,
            Err(_) => DEFAULT_LIMIT,
        };
        let recorder = Self::create(&path, limit)?;
        *open = Some((path, Arc::downgrade(&recorder.shared), Arc::clone(&recorder.path)));
        Ok(Some(recorder))
    }

    /// The capture file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records a datagram from `from` to `to`, stamped with the current time. Never
    /// blocks on the disk (see [`Recorder`] for what is dropped when).
    pub fn record(&self, direction: Direction, from: SocketAddr, to: SocketAddr, payload: &[u8]) {
        self.record_at(SystemTime::now(), direction, from, to, payload);
    }

    /// [`Recorder::record`] with the time given.
    pub fn record_at(&self, at: SystemTime, direction: Direction, from: SocketAddr, to: SocketAddr, payload: &[u8]) {
        let mut s = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        let time = at.duration_since(UNIX_EPOCH).unwrap_or_default();
        let d = Datagram { interface: 0, time, from, to, payload, direction: Some(direction), comment: None };
        s.record(&d, at);
    }

    /// Sends what is batched to the writer now (a recorder does so by itself when a batch
    /// is full or [`BATCH_AGE`] old).
    pub fn flush(&self) {
        self.shared.lock().unwrap_or_else(PoisonError::into_inner).hand_off();
    }

    /// The counters so far.
    pub fn stats(&self) -> RecorderStats {
        let s = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        let mut stats = s.stats;
        stats.dropped += *s.writer_dropped.lock().unwrap_or_else(PoisonError::into_inner);
        stats.failed = s.failed.load(Ordering::Relaxed);
        stats
    }
}

impl Shared {
    fn record(&mut self, d: &Datagram<'_>, at: SystemTime) {
        if self.failed.load(Ordering::Relaxed) {
            self.stats.dropped += 1;
            return;
        }
        let before = self.batch.len();
        match pcapng::encode(&mut self.batch, d, self.ip_id) {
            Ok(len) if self.stats.bytes + len as u64 <= self.limit => {
                self.ip_id = self.ip_id.wrapping_add(1);
                self.stats.bytes += len as u64;
                self.stats.recorded += 1;
                self.in_batch += 1;
            }
            Ok(_) => {
                // Past the limit: the file ends at the block before.
                self.batch.truncate(before);
                self.stats.dropped += 1;
            }
            Err(_) => self.stats.dropped += 1,
        }
        let since = *self.batch_since.get_or_insert(at);
        let old = at.duration_since(since).is_ok_and(|age| age >= BATCH_AGE);
        if self.batch.len() >= BATCH || old {
            self.hand_off();
        }
    }

    /// Gives the batch to the writer thread (or drops it if the writer is behind), and
    /// takes a spare buffer for the next one.
    fn hand_off(&mut self) {
        self.batch_since = None;
        if self.batch.is_empty() {
            return;
        }
        let Some(to_writer) = &self.to_writer else { return };
        let next = self.spare.try_recv().unwrap_or_else(|_| Vec::with_capacity(BATCH + 2048));
        let batch = std::mem::replace(&mut self.batch, next);
        let count = std::mem::take(&mut self.in_batch);
        match to_writer.try_send((batch, count)) {
            Ok(()) => {}
            Err(TrySendError::Full((mut batch, count)) | TrySendError::Disconnected((mut batch, count))) => {
                self.stats.dropped += count;
                self.stats.recorded -= count;
                self.stats.bytes -= batch.len() as u64;
                batch.clear();
                self.batch = batch;
            }
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.hand_off();
        // Closing the queue ends the writer once it has written what is queued.
        self.to_writer = None;
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("porous-pcap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join(name)
    }

    /// Removes a scratch file, and its directory once no other test's file is left in it
    /// (removing a directory that is not empty fails, which is what keeps it for them).
    fn remove_scratch(path: &Path) {
        std::fs::remove_file(path).unwrap();
        if let Some(dir) = path.parent() {
            let _ = std::fs::remove_dir(dir);
        }
    }

    #[test]
    fn records_reach_the_file_and_the_limit_holds() {
        let path = scratch("limit.pcapng");
        let (a, b) = ("127.0.0.1:1".parse().unwrap(), "127.0.0.1:2".parse().unwrap());
        let limit = 10_000;
        let r = Recorder::create(&path, limit).unwrap();
        let payload = [7u8; 100];
        for i in 0..200 {
            let dir = if i % 2 == 0 { Direction::Outbound } else { Direction::Inbound };
            r.record(dir, a, b, &payload);
        }
        let stats = r.stats();
        // A block: 28 bytes of header and trailer, 128 of packet, 12 of flags and end.
        let block = 28 + 128 + 12;
        let head = stats.bytes - stats.recorded * block;
        assert_eq!(stats.recorded, (limit - head) / block, "{stats:?}");
        assert_eq!(stats.recorded + stats.dropped, 200);
        assert!(stats.bytes <= limit);
        drop(r);
        let file = std::fs::read(&path).unwrap();
        assert_eq!(file.len() as u64, stats.bytes);
        remove_scratch(&path);
    }

    #[test]
    fn clones_share_a_file_and_the_last_one_completes_it() {
        let path = scratch("clones.pcapng");
        let (a, b) = ("[::1]:1".parse().unwrap(), "[::1]:2".parse().unwrap());
        let r = Recorder::create(&path, u64::MAX).unwrap();
        let r2 = r.clone();
        r.record(Direction::Outbound, a, b, b"one");
        drop(r);
        r2.record(Direction::Inbound, b, a, b"two");
        let stats = r2.stats();
        assert_eq!((stats.recorded, stats.dropped, stats.failed), (2, 0, false));
        drop(r2);
        assert_eq!(std::fs::read(&path).unwrap().len() as u64, stats.bytes);
        remove_scratch(&path);
    }
}
