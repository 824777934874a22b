//! Runs the real `bench-remote` binary and checks its output against the
//! reference form of `../shared/reference/akka-netty4-remote-benchmark.txt`.

use std::{
    io::{BufRead, BufReader},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use regex::Regex;

const BIN: &str = env!("CARGO_BIN_EXE_bench-remote");
/// Generous: the test profile is a debug build on a shared 2-core machine.
const TIMEOUT: Duration = Duration::from_secs(120);

/// A home folder of this test process's own, so that no run reads or
/// creates the real `~/.actors.cookie`: every child gets it as `HOME`
/// (and no `ACTORS_COOKIE`), so the nodes of one test share the cookie
/// file that the first of them creates there.
fn test_home() -> std::path::PathBuf {
    let home = std::env::temp_dir().join(format!("bench-remote-cli-{}", std::process::id()));
    std::fs::create_dir_all(&home).expect("create the test home");
    home
}

/// The binary, with [`test_home`] as its home.
fn bench() -> Command {
    let mut c = Command::new(BIN);
    c.env("HOME", test_home()).env_remove("ACTORS_COOKIE");
    c
}

/// Runs the binary to completion within [`TIMEOUT`].
fn run(args: &[&str]) -> (bool, String, String) {
    let mut child = bench()
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("bench-remote starts");
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let out = child.wait_with_output().expect("output");
            return (
                status.success(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            );
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("bench-remote {args:?} did not finish within {TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Checks the reference lines and returns the summary's figures.
fn check_reference_lines(out: &str, messages: u64, burst: u64, payload: u64) {
    let start = Regex::new(
        r"^Starting benchmark of (\d+) messages with burst size (\d+) and payload size (\d+)$",
    )
    .unwrap();
    let progress = Regex::new(r"^It took (\d+) ms to deliver (\d+) messages, throughtput (\d+) msg/s, latest round-trip (\d+) ms, remaining (\d+) of (\d+)$").unwrap();
    let summary = Regex::new(r"^== It took (\d+) ms to deliver (\d+) messages, throughtput (\d+) msg/s, max round-trip (\d+) ms, burst size (\d+), payload size (\d+)$").unwrap();
    let percentiles = Regex::new(r"round-trip latency \(us\): p50 (\d+), p90 (\d+), p99 (\d+), p99\.9 (\d+), max (\d+) \((\d+) samples\)$").unwrap();
    let drops = Regex::new(r"^Payloads received (\d+) of (\d+) sent, dropped (\d+)$").unwrap();
    let transport =
        Regex::new(r"^Transport: (\d+) bytes out in (\d+) writes, ([\d.]+) messages per write$")
            .unwrap();

    let lines: Vec<&str> = out.lines().collect();
    let first = lines
        .iter()
        .position(|l| start.is_match(l))
        .unwrap_or_else(|| panic!("no Starting line in:\n{out}"));
    let c = start.captures(lines[first]).unwrap();
    assert_eq!(c[1].parse::<u64>().unwrap(), messages);
    assert_eq!(c[2].parse::<u64>().unwrap(), burst);
    assert_eq!(c[3].parse::<u64>().unwrap(), payload);
    let mut i = first + 1;
    let mut last_remaining = messages;
    while let Some(c) = progress.captures(lines[i]) {
        let (ms, n, tput) = (
            c[1].parse::<u64>().unwrap(),
            c[2].parse::<u64>().unwrap(),
            c[3].parse::<u64>().unwrap(),
        );
        assert!(ms >= 500, "a window is at least 500 ms: {}", lines[i]);
        assert_eq!(tput, n * 1000 / ms, "throughput is n*1000/ms: {}", lines[i]);
        let remaining = c[5].parse::<u64>().unwrap();
        assert!(remaining < last_remaining && remaining % burst == 0);
        assert_eq!(c[6].parse::<u64>().unwrap(), messages);
        last_remaining = remaining;
        i += 1;
    }
    let c = summary
        .captures(lines[i])
        .unwrap_or_else(|| panic!("line {i} is not the summary: {}", lines[i]));
    let ms = c[1].parse::<u64>().unwrap();
    assert_eq!(c[2].parse::<u64>().unwrap(), messages);
    assert_eq!(c[3].parse::<u64>().unwrap(), messages * 1000 / ms.max(1));
    assert_eq!(c[5].parse::<u64>().unwrap(), burst);
    assert_eq!(c[6].parse::<u64>().unwrap(), payload);
    let c = percentiles
        .captures(lines[i + 1])
        .unwrap_or_else(|| panic!("no percentiles line: {}", lines[i + 1]));
    let p: Vec<u64> = (1..=5).map(|k| c[k].parse().unwrap()).collect();
    assert!(
        p.windows(2).all(|w| w[0] <= w[1]),
        "percentiles ascend: {p:?}"
    );
    assert_eq!(c[6].parse::<u64>().unwrap(), messages.div_ceil(burst));
    let c = drops
        .captures(lines[i + 2])
        .unwrap_or_else(|| panic!("no drop line: {}", lines[i + 2]));
    assert_eq!(
        c[1].parse::<u64>().unwrap(),
        messages,
        "every payload arrived"
    );
    assert_eq!(c[2].parse::<u64>().unwrap(), messages);
    assert_eq!(&c[3], "0");
    let c = transport
        .captures(lines[i + 3])
        .unwrap_or_else(|| panic!("no transport line: {}", lines[i + 3]));
    let bytes = c[1].parse::<u64>().unwrap();
    assert!(
        bytes >= messages * payload,
        "at least the payload bytes went out"
    );
    assert!(c[2].parse::<u64>().unwrap() >= 1);
}

#[test]
fn faithful_mode_prints_the_reference_lines() {
    let (ok, out, err) = run(&["--messages", "20000", "--burst", "1000", "--payload", "100"]);
    assert!(ok, "exit status; stderr: {err}");
    check_reference_lines(&out, 20000, 1000, 100);
}

#[test]
fn json_is_the_last_line_with_every_figure() {
    let (ok, out, err) = run(&[
        "--messages",
        "10000",
        "--burst",
        "1000",
        "--payload",
        "64",
        "--json",
        "--raw-ceiling",
    ]);
    assert!(ok, "stderr: {err}");
    let last = out.lines().last().expect("output");
    let v: serde_json::Value = serde_json::from_str(last).expect("last line is JSON");
    for key in [
        "msgs_per_sec",
        "dropped",
        "p50_us",
        "p99_us",
        "max_us",
        "writes",
        "msgs_per_write",
        "ceiling_msgs_per_sec",
    ] {
        assert!(v.get(key).is_some(), "missing {key} in {last}");
    }
    assert_eq!(v["dropped"], 0);
    assert_eq!(v["messages"], 10000);
    assert!(v["msgs_per_sec"].as_f64().unwrap() > 0.0);
    assert!(v["ceiling_msgs_per_sec"].as_f64().unwrap() > 0.0);
}

#[test]
fn bad_options_are_clear_errors() {
    for (args, needle) in [
        (&["--burst", "0"][..], "--burst must be at least 1"),
        (
            &["--raw", "--payload", "100000000"][..],
            "does not fit the maximum frame size",
        ),
        (
            &["--payload", "300000"][..],
            "over the large-message threshold",
        ),
        (
            &["receiver", "--bind", "192.0.2.1:1"][..],
            "cannot listen on 192.0.2.1:1",
        ),
    ] {
        let (ok, _, err) = run(args);
        assert!(!ok, "{args:?} must fail");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

/// Runs `args`, which must be refused before anything runs, and checks
/// that the error names both options and says what to do instead.
fn assert_refused(args: &[&str], needles: &[&str]) {
    let (ok, out, err) = run(args);
    assert!(!ok, "{args:?} must be refused; stdout: {out}");
    assert!(out.is_empty(), "{args:?} ran: {out}");
    for needle in needles {
        assert!(err.contains(needle), "{args:?}: no {needle:?} in {err}");
    }
}

/// Options where one would be ignored, or the figure would mean nothing.
/// Counts are small so a run that is wrongly accepted ends quickly.
#[test]
fn modes_that_cannot_combine_are_refused() {
    let conflict = "cannot be used with";
    for (args, needles) in [
        (
            &["--sweep", "--rate", "1000000", "--messages", "1000"][..],
            &["--sweep", "--rate", conflict, "run them one at a time"][..],
        ),
        (
            &["--sweep", "--compare", "1", "--messages", "1000"],
            &["--sweep", "--compare", conflict, "measures each cell once"],
        ),
        (
            &["--sweep", "--raw", "--messages", "1000"],
            &["--sweep", "--raw", conflict, "--sweep measures actors"],
        ),
        (
            &["--sweep", "--raw-ceiling", "--messages", "1000"],
            &[
                "--sweep",
                "--raw-ceiling",
                conflict,
                "--sweep runs no ceiling",
            ],
        ),
        (
            &["--sweep", "--plot", "/tmp/x.svg", "--messages", "1000"],
            &["--sweep", "--plot", conflict, "not one run to plot"],
        ),
        (
            &["--sweep", "--payload", "1000", "--messages", "1000"],
            &["--sweep", "--payload", conflict, "sets each cell's payload"],
        ),
        (
            &["--sweep", "--pairs", "2", "--messages", "1000"],
            &["--sweep", "--pairs", conflict, "sets each cell's pairs"],
        ),
        (
            &["--rate", "1000000", "--raw", "--messages", "1000"],
            &["--rate", "--raw", conflict, "--rate runs on actors"],
        ),
        (
            &["--rate", "1000000", "--pairs", "2", "--messages", "1000"],
            &["--rate", "--pairs", conflict, "one sender on one schedule"],
        ),
        (
            &["--rate", "1000000", "--burst", "10", "--messages", "1000"],
            &["--rate", "--burst", conflict, "not in bursts; drop --burst"],
        ),
        (
            &[
                "--rate",
                "1000000",
                "--in-flight",
                "3",
                "--messages",
                "1000",
            ],
            &[
                "--rate",
                "--in-flight",
                conflict,
                "not in bursts; drop --in-flight",
            ],
        ),
        (
            &["--rate", "1000000", "--echo-all", "--messages", "1000"],
            &[
                "--rate",
                "--echo-all",
                conflict,
                "already echoes every message",
            ],
        ),
        (
            &["--compare", "1", "--raw-ceiling", "--messages", "1000"],
            &[
                "--compare",
                "--raw-ceiling",
                conflict,
                "ceiling in every pass",
            ],
        ),
        (
            &["--compare", "1", "--json", "--messages", "1000"],
            &["--compare", "--json", conflict, "prints text lines only"],
        ),
        (
            &[
                "--compare",
                "1",
                "--plot",
                "/tmp/x.svg",
                "--messages",
                "1000",
            ],
            &["--compare", "--plot", conflict, "plots nothing"],
        ),
        (
            &["--raw", "--echo-all", "--messages", "1000"],
            &["--raw", "--echo-all", conflict, "echoes markers only"],
        ),
        (
            &["--raw", "--tls", "--messages", "1000"],
            &[
                "--raw",
                "--tls",
                conflict,
                "the raw transport run is plaintext",
            ],
        ),
        (
            &["--raw", "--pairs", "2", "--messages", "1000"],
            &["--raw", "--pairs", conflict, "one sender on one connection"],
        ),
        (
            &["--raw", "--stall-timeout", "5", "--messages", "1000"],
            &["--raw", "--stall-timeout", conflict, "no stall timeout"],
        ),
        // Given after the subcommand, the options still conflict.
        (
            &["sender", "--connect", "127.0.0.1:1", "--raw", "--tls"],
            &[
                "--raw",
                "--tls",
                conflict,
                "the raw transport run is plaintext",
            ],
        ),
    ] {
        assert_refused(args, needles);
    }
}

/// Options the `receiver` and `sender` subcommands would ignore, and
/// `--tls-dir`, which the embedded default ignores. The addresses fail
/// fast if a subcommand wrongly starts.
#[test]
fn options_a_subcommand_ignores_are_refused() {
    let embedded_only = [
        &["--pairs", "2"][..],
        &["--raw"],
        &["--compare", "1"],
        &["--rate", "1000"],
        &["--sweep"],
        &["--layout", "shared"],
    ];
    for (cmd, at) in [("sender", "--connect"), ("receiver", "--bind")] {
        for opt in embedded_only {
            let mut args = vec![cmd, at, "192.0.2.1:1"];
            args.extend_from_slice(opt);
            let tip = if opt[0] == "--layout" {
                "each process has its own runtime".to_owned()
            } else {
                format!("run {} without a subcommand", opt[0])
            };
            assert_refused(
                &args,
                &[
                    &format!("the subcommand '{cmd}' cannot be used with '{}", opt[0]),
                    &tip,
                ],
            );
        }
    }
    // Before the subcommand too.
    assert_refused(
        &["--pairs", "2", "sender", "--connect", "192.0.2.1:1"],
        &[
            "the subcommand 'sender' cannot be used with '--pairs",
            "one pair",
        ],
    );
    for opt in [
        &["--messages", "1000"][..],
        &["--burst", "10"],
        &["--payload", "10"],
        &["--in-flight", "3"],
        &["--echo-all"],
        &["--raw-ceiling"],
        &["--json"],
        &["--plot", "/tmp/x.svg"],
    ] {
        let mut args = vec!["receiver", "--bind", "192.0.2.1:1"];
        args.extend_from_slice(opt);
        assert_refused(
            &args,
            &[
                &format!("the subcommand 'receiver' cannot be used with '{}", opt[0]),
                &format!("pass {} to `sender`", opt[0]),
            ],
        );
    }
    assert_refused(
        &["--tls", "--tls-dir", "/nonexistent", "--messages", "1000"],
        &[
            "--tls-dir is read by `receiver` and `sender` only",
            "drop --tls-dir",
        ],
    );
}

/// `--spin-us` tunes the `--rate` generator and means nothing without it.
#[test]
fn spin_without_rate_is_refused() {
    assert_refused(
        &["--spin-us", "100", "--messages", "1000"],
        &["--spin-us", "--rate"],
    );
}

/// Parses `Generator lateness (us, sent - scheduled): p50 …, p99 …, max …
/// (N samples)` after `prefix`; returns (p50, p99, max, samples).
fn lateness(out: &str, prefix: &str) -> (f64, f64, f64, u64) {
    let re = Regex::new(&format!(
        r"^{}Generator lateness \(us, sent - scheduled\): p50 ([\d.]+), p99 ([\d.]+), max ([\d.]+) \((\d+) samples\)$",
        regex::escape(prefix)
    ))
    .unwrap();
    let c = out
        .lines()
        .find_map(|l| re.captures(l))
        .unwrap_or_else(|| panic!("no {prefix:?}lateness line in:\n{out}"));
    (
        c[1].parse().unwrap(),
        c[2].parse().unwrap(),
        c[3].parse().unwrap(),
        c[4].parse().unwrap(),
    )
}

/// `--rate` prints the generator's lateness beside the latency; with
/// `--raw-ceiling` the ping-pong ceiling runs the same schedule, and both
/// latencies, both latenesses and the ratios are printed and in the JSON.
#[test]
fn rate_reports_generator_lateness_and_its_ceiling() {
    let (ok, out, err) = run(&[
        "--rate",
        "20000",
        "--messages",
        "2000",
        "--raw-ceiling",
        "--json",
    ]);
    assert!(ok, "stderr: {err}");
    let (p50, p99, max, n) = lateness(&out, "");
    assert_eq!(n, 2000);
    assert!(p50 <= p99 && p99 <= max, "{out}");
    assert_eq!(lateness(&out, "Ceiling ").3, 2000);
    let ceiling = Regex::new(r"^Ceiling \(hand-written tokio ping-pong, same schedule, same process\): Per-message round-trip latency \(us\): p50 (\d+), p90 (\d+), p99 (\d+), p99\.9 (\d+), max (\d+) \(2000 samples\)$").unwrap();
    assert!(out.lines().any(|l| ceiling.is_match(l)), "{out}");
    for prefix in ["", "Ceiling "] {
        let from_sent = Regex::new(&format!(
            r"^{prefix}From actual send round-trip latency \(us\): p50 \d+, p90 \d+, p99 \d+, p99\.9 \d+, max \d+ \(2000 samples\)$"
        ))
        .unwrap();
        assert!(out.lines().any(|l| from_sent.is_match(l)), "{out}");
    }
    let ratio = Regex::new(r"^Latency actors / ceiling: p50 ([\d.]+), p99 ([\d.]+)$").unwrap();
    assert!(out.lines().any(|l| ratio.is_match(l)), "{out}");
    let v: serde_json::Value =
        serde_json::from_str(out.lines().last().expect("output")).expect("last line is JSON");
    assert_eq!(v["dropped"], 0);
    for key in [
        "late_p50_us",
        "late_p99_us",
        "late_max_us",
        "from_sent_p50_us",
        "from_sent_p99_us",
        "ceiling_p50_us",
        "ceiling_p99_us",
        "ceiling_late_p99_us",
        "p50_ratio",
        "p99_ratio",
    ] {
        assert!(v[key].as_f64().is_some(), "missing {key} in {v}");
    }
}

/// `--rate --compare N` alternates the actors and the ceiling on one
/// schedule and ends with the median latencies and ratios.
#[test]
fn rate_compare_prints_median_ratios() {
    let (ok, out, err) = run(&[
        "--rate",
        "20000",
        "--messages",
        "1000",
        "--compare",
        "2",
        "--spin-us",
        "500",
    ]);
    assert!(ok, "stderr: {err}");
    let pass = Regex::new(r"^pass \d: actors p50 \d+ us, p99 \d+ us \(generator late p50 [\d.]+ us, p99 [\d.]+ us\); ceiling p50 \d+ us, p99 \d+ us \(generator late p50 [\d.]+ us, p99 [\d.]+ us\); ratio p50 [\d.]+, p99 [\d.]+$").unwrap();
    assert_eq!(out.lines().filter(|l| pass.is_match(l)).count(), 2, "{out}");
    let last = Regex::new(r"^median of 2: actors p50 \d+ us, p99 \d+ us; ceiling p50 \d+ us, p99 \d+ us; generator late p99 [\d.]+ us / [\d.]+ us; ratio p50 [\d.]+, p99 [\d.]+$").unwrap();
    let l = out.lines().last().expect("output");
    assert!(last.is_match(l), "{out}");
}

/// `--raw-ceiling` prints the ceiling's marker round-trips and the p50/p99
/// ratios; with `--burst 1` that is a lone ping-pong against the project's.
#[test]
fn raw_ceiling_prints_marker_latency_beside_the_run() {
    let (ok, out, err) = run(&["--burst", "1", "--messages", "300", "--raw-ceiling"]);
    assert!(ok, "stderr: {err}");
    check_reference_lines(&out, 300, 1, 100);
    let ceiling = Regex::new(r"^Ceiling marker round-trip latency \(us\): p50 (\d+), p90 (\d+), p99 (\d+), p99\.9 (\d+), max (\d+) \(300 samples\)$").unwrap();
    assert!(out.lines().any(|l| ceiling.is_match(l)), "{out}");
    let ratio =
        Regex::new(r"^Marker round-trip actors / ceiling: p50 ([\d.]+), p99 ([\d.]+)$").unwrap();
    let c = out
        .lines()
        .find_map(|l| ratio.captures(l))
        .unwrap_or_else(|| panic!("no ratio line in {out}"));
    assert!(c[1].parse::<f64>().unwrap() > 0.0);
}

#[test]
fn compare_zero_is_refused_not_run_once() {
    let (ok, out, err) = run(&["--compare", "0", "--messages", "1000"]);
    assert!(!ok, "ran: {out}");
    assert!(err.contains("--compare must be at least 1"), "{err}");
}

/// Combinations that work stay accepted (`scripts/ab.sh` passes its extra
/// options after `--compare 1`).
#[test]
fn combinations_that_work_are_accepted() {
    for extra in [
        &["--in-flight", "3"][..],
        &["--layout", "shared"],
        &["--tls"],
        &["--raw"],
        &["--pairs", "2", "--echo-all"],
    ] {
        let mut args = vec!["--compare", "1", "--messages", "2000", "--burst", "500"];
        args.extend_from_slice(extra);
        let (ok, out, err) = run(&args);
        assert!(ok, "{args:?}: {err}");
        let medians: Vec<&str> = out
            .lines()
            .filter(|l| l.starts_with("median of 1:"))
            .collect();
        // The msg/s line comes last: `scripts/ab.sh` reads it.
        assert!(
            medians
                .last()
                .is_some_and(|l| l.contains(" msg/s, ceiling ")),
            "{args:?}: {out}"
        );
        assert!(
            medians.iter().any(|l| l.contains("marker round-trip")),
            "{args:?}: {out}"
        );
    }
}

/// A receiver process; killed on drop.
struct Receiver {
    child: Child,
    addr: String,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_receiver() -> Receiver {
    start_receiver_with(&[])
}

fn start_receiver_with(extra: &[&str]) -> Receiver {
    let mut child = bench()
        .args(["receiver", "--bind", "127.0.0.1:0"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("receiver starts");
    let stdout = child.stdout.take().expect("piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let line = rx
        .recv_timeout(TIMEOUT)
        .expect("the receiver announces its address");
    let addr = Regex::new(r"tcp://receiver@([\d.]+:\d+)/user/receiver")
        .unwrap()
        .captures(&line)
        .unwrap_or_else(|| panic!("unexpected first line {line}"))[1]
        .to_owned();
    Receiver { child, addr }
}

#[test]
fn two_process_mode_serves_senders_one_after_another() {
    let r = start_receiver();
    for _ in 0..2 {
        let (ok, out, err) = run(&[
            "sender",
            "--connect",
            &r.addr,
            "--messages",
            "10000",
            "--burst",
            "1000",
        ]);
        assert!(ok, "stderr: {err}");
        check_reference_lines(&out, 10000, 1000, 100);
    }
}

/// `--secret-file` gives both processes the secret in a file (created on
/// first use); a sender with another secret is refused, and the error says
/// it is the secret, naming the file.
#[test]
fn secret_file_sets_the_secret_and_another_secret_is_refused() {
    let dir = test_home().join("secrets");
    std::fs::create_dir_all(&dir).unwrap();
    let ours = dir.join("ours.secret");
    let theirs = dir.join("theirs.secret");
    let ours = ours.to_str().unwrap();
    let r = start_receiver_with(&["--secret-file", ours]);
    let (ok, out, err) = run(&[
        "sender",
        "--connect",
        &r.addr,
        "--messages",
        "2000",
        "--burst",
        "500",
        "--secret-file",
        ours,
    ]);
    assert!(ok, "stderr: {err}");
    check_reference_lines(&out, 2000, 500, 100);
    let theirs = theirs.to_str().unwrap();
    let (ok, _, err) = run(&[
        "sender",
        "--connect",
        &r.addr,
        "--messages",
        "1000",
        "--stall-timeout",
        "5",
        "--secret-file",
        theirs,
    ]);
    assert!(!ok);
    assert!(err.contains("shared secret mismatch"), "{err}");
    assert!(err.contains(theirs), "names our secret's file: {err}");
}

#[test]
fn sender_fails_fast_when_the_receiver_is_gone() {
    let r = start_receiver();
    let addr = r.addr.clone();
    drop(r);
    let started = Instant::now();
    let (ok, _, err) = run(&[
        "sender",
        "--connect",
        &addr,
        "--messages",
        "1000",
        "--stall-timeout",
        "5",
    ]);
    assert!(!ok);
    assert!(err.contains("cannot reach the receiver"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(60));
}

#[test]
fn tls_mode_runs_the_same_pattern_over_mutual_tls() {
    let (ok, out, err) = run(&["--tls", "--messages", "10000", "--burst", "1000"]);
    assert!(ok, "stderr: {err}");
    check_reference_lines(&out, 10000, 1000, 100);
    let tls = Regex::new(r"^TLS: (\d+) batches of (\d+) bytes on average, at least (\d+) records of <= 16 KiB \((\d+) messages per record\)$").unwrap();
    let line = out
        .lines()
        .find(|l| l.starts_with("TLS:"))
        .expect("a TLS line");
    let c = tls.captures(line).unwrap_or_else(|| panic!("{line}"));
    assert!(
        c[4].parse::<u64>().unwrap() > 1,
        "records carry many messages: {line}"
    );
}

/// `--metrics-addr` serves the nodes' metrics while the process runs: a
/// receiver's endpoint shows what a sender sent it.
#[test]
fn metrics_addr_serves_the_nodes_metrics_while_running() {
    use std::io::{Read, Write};
    let mut child = bench()
        .args([
            "receiver",
            "--bind",
            "127.0.0.1:0",
            "--metrics-addr",
            "127.0.0.1:0",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("receiver starts");
    let lines = |pipe: Box<dyn std::io::Read + Send>| {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        rx
    };
    let err = lines(Box::new(child.stderr.take().expect("piped")));
    let out = lines(Box::new(child.stdout.take().expect("piped")));
    let r = Receiver {
        child,
        addr: {
            let line = out.recv_timeout(TIMEOUT).expect("the receiver's address");
            Regex::new(r"tcp://receiver@([\d.]+:\d+)/user/receiver")
                .unwrap()
                .captures(&line)
                .unwrap_or_else(|| panic!("unexpected first line {line}"))[1]
                .to_owned()
        },
    };
    let line = err.recv_timeout(TIMEOUT).expect("the metrics address");
    let metrics = Regex::new(r"^metrics: http://([\d.]+:\d+)/metrics$")
        .unwrap()
        .captures(&line)
        .unwrap_or_else(|| panic!("unexpected stderr line {line}"))[1]
        .to_owned();
    let (ok, _, stderr) = run(&["sender", "--connect", &r.addr, "--messages", "10000"]);
    assert!(ok, "stderr: {stderr}");
    let scrape = || {
        let mut s = std::net::TcpStream::connect(&metrics).expect("the endpoint answers");
        s.set_read_timeout(Some(TIMEOUT)).expect("timeout");
        s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n")
            .expect("request");
        let mut text = String::new();
        s.read_to_string(&mut text).expect("response");
        text
    };
    // Per-peer values are published once per heartbeat interval (1 s).
    let received = Regex::new(
        r#"(?m)^remoting_bytes_in_total\{node="receiver@[^"]+",peer="sender@[^"]+"\} (\d+)$"#,
    )
    .unwrap();
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let text = scrape();
        assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
        if let Some(c) = received.captures(&text)
            && c[1].parse::<u64>().expect("a count") > 10000 * 100
        {
            assert!(
                text.contains("# TYPE actors_handling_seconds summary"),
                "{text}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no bytes from the sender in {text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Piped, a long run draws no progress bar: stderr stays empty and stdout
/// holds the report lines only.
#[test]
fn compare_draws_no_progress_bar_when_piped() {
    let (ok, out, err) = run(&["--compare", "2", "--messages", "5000", "--burst", "500"]);
    assert!(ok, "stderr: {err}");
    assert_eq!(err, "", "nothing on stderr when piped");
    let pass = Regex::new(
        r"^pass [12]: actors \d+ msg/s \([\d.]+ msgs/write\), ceiling \d+ msg/s, ratio [\d.]+$",
    )
    .unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert!(pass.is_match(lines[0]) && pass.is_match(lines[1]), "{out}");
    assert!(lines[3].starts_with("median of 2: actors "), "{out}");
}

/// With `--echo-all`, the ceiling times every message's round trip as the
/// actors' run does (a stamp at send, a histogram entry per echo), so the
/// ratio compares the same work.
#[test]
fn the_echo_ceiling_times_every_message_as_the_actors_do() {
    let (ok, out, err) = run(&[
        "--echo-all",
        "--raw-ceiling",
        "--messages",
        "20000",
        "--burst",
        "1000",
    ]);
    assert!(ok, "stderr: {err}");
    let samples = |prefix: &str| -> u64 {
        let line = out
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} line in:\n{out}"));
        let re = Regex::new(r"\((\d+) samples\)$").unwrap();
        re.captures(line).unwrap_or_else(|| panic!("{line}"))[1]
            .parse()
            .unwrap()
    };
    // Every timed message, warm-up included, on both sides.
    assert!(samples("Per-message round-trip") >= 20_000, "{out}");
    assert!(samples("Ceiling per-message round-trip") >= 20_000, "{out}");
}

/// `cluster` at one small size reports, besides convergence and traffic,
/// the time to suspect an abruptly stopped member and the time until a
/// group ask reaches its restarted incarnation.
#[test]
fn cluster_reports_suspect_and_restart_times() {
    let (ok, out, err) = run(&["--json", "cluster", "--nodes", "3", "--probe-ms", "100"]);
    assert!(ok, "bench-remote cluster failed:\n{out}\n{err}");
    let line = out
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON line:\n{out}"));
    let row: serde_json::Value = serde_json::from_str(line).expect("a JSON row");
    assert_eq!(row["nodes"], 3, "{line}");
    for key in [
        "converge_ms",
        "suspect_after_kill_ms",
        "traffic_after_restart_ms",
        "down_seen_ms",
    ] {
        let v = row[key]
            .as_f64()
            .unwrap_or_else(|| panic!("no {key}: {line}"));
        assert!(v > 0.0 && v < 120_000.0, "{key} = {v}: {line}");
    }
}

/// The figures of one `sharding` move line.
struct MoveLine {
    shards: u64,
    ms: u64,
    aside_ms: Option<u64>,
    sent: u64,
    delivered: u64,
    dropped: u64,
    uncounted: i64,
}

/// Finds the line of change `what` (`leave`, `join`, `kill`) and checks
/// that its counts add up.
fn move_line(out: &str, what: &str) -> MoveLine {
    let re = Regex::new(&format!(
        r"^{what} .*?(?: holding (\d+) shards)?: (?:(\d+) shards rebalanced onto it|active elsewhere) after (\d+) ms(?: \([a-z ]+ after (\d+) ms\))?; sent (\d+) = delivered (\d+) \+ dropped (\d+) \+ uncounted (-?\d+); peak buffered (\d+); dead letters on the other nodes (\d+)$"
    ))
    .unwrap();
    let c = out
        .lines()
        .find_map(|l| re.captures(l))
        .unwrap_or_else(|| panic!("no {what} line in:\n{out}"));
    let n = |i: usize| c.get(i).map(|m| m.as_str().parse::<u64>().unwrap());
    let m = MoveLine {
        shards: n(1).or(n(2)).unwrap(),
        ms: n(3).unwrap(),
        aside_ms: n(4),
        sent: n(5).unwrap(),
        delivered: n(6).unwrap(),
        dropped: n(7).unwrap(),
        uncounted: c[8].parse().unwrap(),
    };
    assert_eq!(
        m.sent as i64,
        m.delivered as i64 + m.dropped as i64 + m.uncounted,
        "{what}: the counts add up:\n{out}"
    );
    assert!(m.sent > 0, "{what}: traffic flowed:\n{out}");
    m
}

/// `sharding` on three small nodes prints the indirection rates and, for
/// a leave, a join and a kill, the move time and where every message sent
/// meanwhile went: all delivered on a leave and a join; on a kill,
/// nothing delivered twice and the shards active again only after the
/// down-removal margin.
#[test]
fn sharding_reports_indirection_and_moves_whose_counts_add_up() {
    let (ok, out, err) = run(&[
        "sharding",
        "--nodes",
        "3",
        "--entities",
        "100",
        "--messages",
        "2000",
        "--asks",
        "200",
        "--stable-ms",
        "1000",
    ]);
    assert!(ok, "bench-remote sharding failed:\n{out}\n{err}");
    assert!(
        Regex::new(r"(?m)^sharding: 3 nodes .*, 100 entities in 100 shards; .*margin 1000 ms")
            .unwrap()
            .is_match(&out),
        "no header line:\n{out}"
    );
    let rates = |kind: &str, count: &str, unit: &str| {
        let re = Regex::new(&format!(
            r"(?m)^{kind}, {count} one [a-z ]+: through entity_ref (\d+){unit}.*, to refs resolved once (\d+){unit}.*, indirection ([\d.]+)x$"
        ))
        .unwrap();
        let c = re
            .captures(&out)
            .unwrap_or_else(|| panic!("no {kind} line:\n{out}"));
        let (by_entity, resolved, ratio) = (
            c[1].parse::<f64>().unwrap(),
            c[2].parse::<f64>().unwrap(),
            c[3].parse::<f64>().unwrap(),
        );
        assert!(by_entity > 0.0 && resolved > 0.0, "{out}");
        // The ratio is of the unrounded rates.
        assert!(
            (ratio - resolved / by_entity).abs() <= 0.01 + 0.01 * ratio,
            "{kind}: {ratio} vs {resolved}/{by_entity}"
        );
    };
    rates("tell", "2000", " msg/s");
    rates("ask", "200", "/s");
    for what in ["leave", "join"] {
        let m = move_line(&out, what);
        assert!(m.shards > 0, "{what}: shards moved:\n{out}");
        assert_eq!(
            (m.delivered, m.dropped, m.uncounted),
            (m.sent, 0, 0),
            "{what}: every message delivered:\n{out}"
        );
    }
    assert!(move_line(&out, "leave").aside_ms.is_some(), "{out}");
    let kill = move_line(&out, "kill");
    assert!(kill.shards > 0 && kill.delivered > 0, "{out}");
    assert!(kill.uncounted >= 0, "nothing delivered twice:\n{out}");
    // Down only after the stable-after, active only after the margin.
    let down = kill.aside_ms.expect("the kill line says when it was down");
    assert!(down >= 1000 && kill.ms >= down, "{out}");
}

/// `sharding --json` prints one JSON line with every figure.
#[test]
fn sharding_json_has_every_figure() {
    let (ok, out, err) = run(&[
        "--json",
        "sharding",
        "--nodes",
        "3",
        "--entities",
        "30",
        "--messages",
        "500",
        "--asks",
        "50",
        "--stable-ms",
        "1000",
    ]);
    assert!(ok, "bench-remote sharding failed:\n{out}\n{err}");
    let line = out
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON line:\n{out}"));
    let v: serde_json::Value = serde_json::from_str(line).expect("a JSON object");
    assert_eq!(v["nodes"], 3, "{line}");
    assert_eq!(v["entities"], 30, "{line}");
    for key in ["tell_ratio", "ask_ratio", "tell_entity_ref_per_sec"] {
        assert!(
            v["indirection"][key].as_f64().is_some_and(|x| x > 0.0),
            "{key}: {line}"
        );
    }
    let moves = v["moves"].as_array().expect("moves");
    let kinds: Vec<&str> = moves.iter().filter_map(|m| m["change"].as_str()).collect();
    assert_eq!(kinds, ["leave", "join", "kill"], "{line}");
    for m in moves {
        let n = |k: &str| m[k].as_i64().unwrap_or_else(|| panic!("{k}: {line}"));
        assert_eq!(
            n("sent"),
            n("delivered") + n("dropped") + n("uncounted"),
            "{m}"
        );
    }
}

/// Options of the burst pattern are refused by `sharding`, with a tip.
#[test]
fn sharding_refuses_options_it_would_ignore() {
    for opt in [&["--payload", "10"][..], &["--tls"], &["--pairs", "2"]] {
        let mut args = vec!["sharding"];
        args.extend_from_slice(opt);
        assert_refused(
            &args,
            &[
                &format!("the subcommand 'sharding' cannot be used with '{}", opt[0]),
                &format!(
                    "`sharding` starts its own nodes and sends its own messages; drop {}",
                    opt[0]
                ),
            ],
        );
    }
}
