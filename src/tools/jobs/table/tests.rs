//! Unit tests of `tools::jobs::table`.

use super::*;
use crate::base::testutil::TempDir;
use crate::tools::testutil::WATCHDOG;

fn ring(dir: &TempDir, window: u64, start: u64) -> StreamFile {
    StreamFile::create(&dir.path("s.out"), window, start).unwrap()
}

#[test]
fn a_window_keeps_the_newest_bytes_at_absolute_offsets() {
    let tmp = TempDir::new("ring");
    let f = ring(&tmp, 10, 0);
    f.write(b"0123456789abcdef");
    assert_eq!(f.total(), 16);
    let c = f.read(0, 100);
    assert_eq!(c.data, b"6789abcdef");
    assert_eq!((c.from, c.next, c.skipped, c.total), (6, 16, 6, 16));
    // An offset inside the window, a small max, and a read wrapping the ring end.
    let c = f.read(8, 3);
    assert_eq!((c.data.as_slice(), c.from, c.next), (&b"89a"[..], 8, 11));
    f.write(b"XYZ");
    let c = f.read(10, 100);
    assert_eq!(c.data, b"abcdefXYZ");
    assert_eq!((c.skipped, c.next, c.total), (0, 19, 19));
    // Past the end: nothing, and the offset stays where it was asked.
    let c = f.read(25, 100);
    assert_eq!((c.data.len(), c.next, c.skipped), (0, 25, 0));
    // A chunk larger than the window keeps only its tail.
    f.write(&[b'q'; 25]);
    let c = f.read(0, 100);
    assert_eq!((c.data, c.from, c.skipped), (vec![b'q'; 10], 34, 34));
    assert_eq!(
        std::fs::metadata(tmp.path("s.out")).unwrap().len(),
        HEADER_BYTES + 10,
        "the file never grows past its window"
    );
}

#[test]
fn a_window_that_starts_late_reports_the_bytes_before_it_skipped() {
    let tmp = TempDir::new("ring");
    let f = ring(&tmp, 100, 40);
    f.write(b"tail");
    let c = f.read(0, 100);
    assert_eq!(
        (c.data.as_slice(), c.from, c.skipped, c.next),
        (&b"tail"[..], 40, 40, 44)
    );
    assert_eq!(f.disk_bytes(), HEADER_BYTES + 4);
}

#[test]
fn a_ring_file_reopens_with_its_totals() {
    let tmp = TempDir::new("ring");
    {
        let f = ring(&tmp, 8, 0);
        f.write(b"abcdefghijkl");
    }
    let f = StreamFile::open(&tmp.path("s.out")).unwrap();
    assert_eq!(f.total(), 12);
    assert_eq!(f.read(0, 100).data, b"efghijkl");
    std::fs::write(tmp.path("bad.out"), b"not a ring file at all, no magic").unwrap();
    assert!(StreamFile::open(&tmp.path("bad.out")).is_err());
}

#[test]
fn reads_racing_a_wrapping_writer_are_never_torn() {
    // Every byte at absolute offset o is (o % 251): any byte a reader returns must
    // match its offset, however the writer laps the ring meanwhile.
    let tmp = TempDir::new("ring");
    let f = Arc::new(ring(&tmp, 4096, 0));
    let writer = {
        let f = Arc::clone(&f);
        std::thread::spawn(move || {
            let mut o: u64 = 0;
            for _ in 0..2000 {
                let chunk: Vec<u8> = (o..o + 1500).map(|x| (x % 251) as u8).collect();
                f.write(&chunk);
                o += 1500;
            }
        })
    };
    while !writer.is_finished() {
        let c = f.read(f.total().saturating_sub(3000), 4096);
        for (i, b) in c.data.iter().enumerate() {
            assert_eq!(
                *b as u64,
                (c.from + i as u64) % 251,
                "torn read at {}",
                c.from
            );
        }
    }
    writer.join().unwrap();
}

fn table(tmp: &TempDir, tweak: impl FnOnce(&mut JobConfig)) -> Arc<JobTable> {
    let mut cfg = JobConfig {
        dir: Some(tmp.path("jobs")),
        window: 1000,
        disk_cap: 100_000,
        ..JobConfig::default()
    };
    tweak(&mut cfg);
    JobTable::new(cfg)
}

fn admit(t: &JobTable, scope: &str) -> Result<Arc<Job>, String> {
    t.admit(Admit {
        id: None,
        scope: scope.into(),
        principal: "p".into(),
        session: None,
        command: "true".into(),
        stdout_start: 0,
        stderr_start: 0,
    })
}

fn end(t: &JobTable, job: &Arc<Job>, code: i32) {
    t.on_exit(Arc::clone(job))(RunResult {
        stdout: vec![],
        stderr: vec![],
        stdout_truncated: false,
        stderr_truncated: false,
        exit_code: code,
        status: None,
        end: End::Exited,
        duration: Duration::ZERO,
        oom_limit: None,
        kept: 0,
        kept_hold_output: false,
    });
}

const G1: &str = "0000000a-aaaa-4bbb-8ccc-dddddddddddd";
const G2: &str = "0000000b-aaaa-4bbb-8ccc-dddddddddddd";

#[test]
fn limits_per_scope_and_in_all_refuse_one_more() {
    let tmp = TempDir::new("jobs");
    let t = table(&tmp, |c| {
        c.per_scope = 2;
        c.total = 3;
    });
    let a = admit(&t, G1).unwrap();
    admit(&t, G1).unwrap();
    let err = admit(&t, G1).unwrap_err();
    assert_eq!(
        err,
        "too many running jobs (2) under this grant; cancel one or wait"
    );
    admit(&t, G2).unwrap();
    let err = admit(&t, OWNER_SCOPE).unwrap_err();
    assert_eq!(
        err,
        "too many running jobs (3) on this box; cancel one or wait"
    );
    end(&t, &a, 0);
    admit(&t, G1).unwrap();
}

#[test]
fn the_disk_cap_refuses_a_job_that_cannot_fit_and_says_what_to_do() {
    // A window of 1000 bytes: the headroom is the window, a start reserves 2064.
    let tmp = TempDir::new("jobs");
    let t = table(&tmp, |c| {
        c.disk_cap = 4_500;
        c.disk_share = 4_500;
    });
    let a = admit(&t, G1).unwrap();
    admit(&t, G2).unwrap();
    let err = admit(&t, OWNER_SCOPE).unwrap_err();
    for needle in [
        "2064 bytes",
        "4128 of the 4500",
        "--job-disk-bytes",
        "bash_cancel",
    ] {
        assert!(err.contains(needle), "{needle}: {err}");
    }
    let files = std::fs::read_dir(tmp.path("jobs").join(G1))
        .unwrap()
        .count();
    assert_eq!(files, 2, "the refused start created nothing");
    JobSink::write(&*a, Which::Stdout, b"12345");
    end(&t, &a, 0);
    assert_eq!(t.reserved_bytes(), 2064 + 2 * HEADER_BYTES + 5);
    admit(&t, G1).unwrap();
}

#[test]
fn the_share_holds_its_bound_and_refuses_one_byte_more() {
    // A window of 1000 bytes: a start reserves 2 × (32 + 1000) = 2064 bytes.
    for (share, fits) in [(2 * 2064, 2), (2 * 2064 - 1, 1)] {
        let tmp = TempDir::new("jobs-share-bound");
        let t = table(&tmp, |c| c.disk_share = share);
        for _ in 0..fits {
            admit(&t, G1).unwrap();
        }
        let err = admit(&t, G1).unwrap_err();
        assert!(err.contains(&format!("of the {share} bytes")), "{err}");
        admit(&t, G2).unwrap();
        admit(&t, OWNER_SCOPE).unwrap();
    }
}

/// Disk blocks a file really uses.
fn allocated(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap().blocks() * 512
}

#[test]
fn a_scope_holds_at_most_its_share_and_the_others_still_start() {
    const MIB: u64 = 1 << 20;
    let tmp = TempDir::new("jobs-share");
    let share = 3 * MIB + 4 * HEADER_BYTES;
    let t = table(&tmp, |c| {
        c.window = 2 * MIB;
        c.disk_cap = 64 * MIB;
        c.disk_share = share;
    });
    // A start reserves a header and 1 MiB of headroom per stream, not two windows.
    let a = admit(&t, G1).unwrap();
    assert_eq!(t.scope_reserved_bytes(G1), 2 * (MIB + HEADER_BYTES));
    // One stream may use the job's whole headroom.
    JobSink::write(&*a, Which::Stdout, &vec![b'o'; 2 * MIB as usize]);
    assert_eq!(a.out.read(0, usize::MAX).data.len() as u64, 2 * MIB);
    assert_eq!(t.scope_reserved_bytes(G1), 2 * (MIB + HEADER_BYTES));
    // The share + 1 byte: a second job of this grant does not fit; another grant's does.
    let err = admit(&t, G1).unwrap_err();
    assert!(
        err.contains("this grant's share") && err.contains("--job-disk-share"),
        "{err}"
    );
    let b = admit(&t, G2).unwrap();
    // At its share, a stream keeps only what fits and gives the rest of the disk back.
    JobSink::write(&*a, Which::Stderr, &vec![b'e'; 2 * MIB as usize]);
    assert_eq!(t.scope_reserved_bytes(G1), share);
    let kept = a.err.held();
    assert_eq!(kept, share - 2 * MIB - 2 * HEADER_BYTES);
    let c = a.err.read(0, usize::MAX);
    assert_eq!((c.skipped, c.data.len() as u64), (2 * MIB - kept, kept));
    JobSink::write(&*a, Which::Stderr, &vec![b'f'; MIB as usize / 2]);
    assert_eq!(a.err.held(), kept, "a full share keeps its size");
    let c = a.err.read(0, usize::MAX);
    assert!(c.data.ends_with(&vec![b'f'; MIB as usize / 2]));
    let err_file = tmp.path("jobs").join(G1).join(format!("{}.err", a.id));
    assert!(
        allocated(&err_file) <= kept + 64 * 1024,
        "dropped bytes' blocks were freed: {} allocated",
        allocated(&err_file)
    );
    assert!(t.reserved_bytes() <= share + t.scope_reserved_bytes(G2));
    // The other grant grows as it needs.
    JobSink::write(&*b, Which::Stdout, &vec![b'x'; 2 * MIB as usize]);
    assert_eq!(b.out.held(), 2 * MIB);
    // An end gives back the headroom, a removal everything.
    end(&t, &a, 0);
    assert_eq!(
        t.scope_reserved_bytes(G1),
        2 * MIB + kept + 2 * HEADER_BYTES
    );
    t.end_scope(G1);
    assert_eq!(t.scope_reserved_bytes(G1), 0);
    assert!(!err_file.exists());
}

#[test]
fn files_are_private_and_an_ended_scope_refuses_and_is_removed() {
    let tmp = TempDir::new("jobs");
    let t = table(&tmp, |_| {});
    let job = admit(&t, G1).unwrap();
    t.spawned(&job, 999_999, None);
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let dir = tmp.path("jobs").join(G1);
    assert_eq!((mode(&tmp.path("jobs")), mode(&dir)), (0o700, 0o700));
    for ext in ["out", "err", "json"] {
        assert_eq!(mode(&dir.join(format!("{}.{ext}", job.id))), 0o600, "{ext}");
    }
    t.end_scope(G1);
    assert_eq!(
        admit(&t, G1).unwrap_err(),
        "this grant has ended; no job can start under it"
    );
    assert!(
        dir.exists(),
        "a running job keeps its files until it has ended"
    );
    // Its end removes them at once: an ended grant holds nothing.
    end(&t, &job, 0);
    assert!(!dir.exists());
    assert!(t.list(G1).is_empty());
    assert_eq!(t.reserved_bytes(), 0);
}

#[test]
fn links_in_the_jobs_dir_are_refused_never_followed() {
    let tmp = TempDir::new("jobs-links");
    let elsewhere = TempDir::new("jobs-elsewhere");
    // A scope dir that is a link: the start is refused, nothing is written through it.
    std::fs::create_dir_all(tmp.path("jobs")).unwrap();
    std::os::unix::fs::symlink(&elsewhere.0, tmp.path("jobs").join(G1)).unwrap();
    let t = table(&tmp, |_| {});
    let err = admit(&t, G1).unwrap_err();
    assert!(err.contains("symbolic link"), "{err}");
    assert_eq!(std::fs::read_dir(&elsewhere.0).unwrap().count(), 0);
    // A record that is a link is not read at recovery: the job's files are removed,
    // what the link pointed at is left alone.
    let job = admit(&t, G2).unwrap();
    end(&t, &job, 0);
    let record = tmp.path("jobs").join(G2).join(format!("{}.json", job.id));
    let copy = elsewhere.path("record.json");
    std::fs::copy(&record, &copy).unwrap();
    std::fs::remove_file(&record).unwrap();
    std::os::unix::fs::symlink(&copy, &record).unwrap();
    let again = table(&tmp, |_| {});
    assert_eq!(
        again.recover().unwrap(),
        0,
        "the linked record was followed"
    );
    assert!(copy.exists());
    assert!(
        !tmp.path("jobs").join(G1).exists(),
        "the linked scope is removed"
    );
}

#[test]
fn ended_scopes_without_jobs_are_remembered_up_to_their_bound() {
    let tmp = TempDir::new("jobs");
    let t = table(&tmp, |_| {});
    let scope = |n: usize| format!("{n:08x}-aaaa-4bbb-8ccc-dddddddddddd");
    for n in 0..=MAX_ENDED_SCOPES {
        t.end_scope(&scope(n));
    }
    assert!(
        t.janitor.get().is_none(),
        "nothing to clean: no janitor thread"
    );
    assert!(admit(&t, &scope(MAX_ENDED_SCOPES)).is_err());
    assert!(admit(&t, &scope(1)).is_err());
    admit(&t, &scope(0)).expect("the oldest of bound + 1 was forgotten");
}

#[test]
fn finished_jobs_past_the_kept_bound_go_oldest_first() {
    let tmp = TempDir::new("jobs");
    let t = table(&tmp, |c| c.kept_per_scope = 2);
    let jobs: Vec<_> = (0..3).map(|_| admit(&t, G1).unwrap()).collect();
    for j in &jobs {
        end(&t, j, 0);
    }
    let left: Vec<String> = t.list(G1).iter().map(|j| j.id.clone()).collect();
    assert_eq!(left, [jobs[1].id.clone(), jobs[2].id.clone()]);
    assert!(!jobs[0].path("out").exists());
}

/// Blocks the first `job_ended` until released, so a test can stop a job's report
/// halfway: its state already says ended, its audit record is not yet queued.
struct HeldMeter {
    entered: crossbeam_channel::Sender<()>,
    release: crossbeam_channel::Receiver<()>,
}

impl JobMeter for HeldMeter {
    fn job_started(&self) {}
    fn job_ended(&self, _: &str) {
        let _ = self.entered.send(());
        let _ = self.release.recv_timeout(WATCHDOG);
    }
}

#[test]
fn shutdown_waits_until_a_killed_jobs_end_is_audited_not_just_marked() {
    let tmp = TempDir::new("jobs");
    let t = table(&tmp, |_| {});
    let (entered_tx, entered) = crossbeam_channel::bounded(1);
    let (release, release_rx) = crossbeam_channel::bounded(1);
    t.report_to(
        Audit::discard(),
        Arc::new(HeldMeter {
            entered: entered_tx,
            release: release_rx,
        }),
    );
    let job = admit(&t, G1).unwrap();
    t.spawned(&job, 1_000_000, None);
    let reporter = {
        let (t, job) = (Arc::clone(&t), Arc::clone(&job));
        std::thread::spawn(move || end(&t, &job, 0))
    };
    entered
        .recv_timeout(WATCHDOG)
        .expect("watchdog: the end was never reported");
    assert!(!job.is_running(), "the state already says ended");
    let (done_tx, done) = crossbeam_channel::bounded(1);
    let stopper = {
        let t = Arc::clone(&t);
        std::thread::spawn(move || {
            t.shutdown();
            let _ = done_tx.send(());
        })
    };
    assert_eq!(
        done.recv_timeout(Duration::from_millis(200)),
        Err(crossbeam_channel::RecvTimeoutError::Timeout),
        "shutdown returned before the job's end was audited"
    );
    release.send(()).unwrap();
    done.recv_timeout(WATCHDOG)
        .expect("watchdog: shutdown never returned once the end was audited");
    reporter.join().unwrap();
    stopper.join().unwrap();
}

#[test]
fn ids_and_scopes() {
    let id = new_job_id();
    assert!(is_job_id(&id), "{id}");
    assert_ne!(id, new_job_id());
    for bad in [
        "",
        "ABCDEF0123456789",
        "0123456789abcde",
        "../../etc/passwd",
    ] {
        assert!(!is_job_id(bad), "{bad}");
    }
    assert!(is_scope(OWNER_SCOPE) && is_scope(G1) && !is_scope("..") && !is_scope("x"));
    assert_eq!(command_note(&"é".repeat(1000)).len(), 1024);
}

#[test]
fn a_live_process_has_a_start_time() {
    let me = std::process::id() as i32;
    assert!(crate::tools::process::start_ticks(me).is_some());
}
