//! One file per way of running the benchmark; `main.rs` picks one after
//! parsing and validating the options.
//!
//! - `burst`: the default, Akka's faithful burst run on actors, one pair or
//!   `--pairs N` sharing the one connection; also the measurement the other
//!   embedded modes repeat.
//! - `raw`: `--raw`, the same pattern over `transport` frames, no actors.
//! - `compare`: `--compare N`, the mode and the ceiling alternated N times,
//!   median ratio.
//! - `rate`: `--rate R`, wrk2-style constant rate, latency from the schedule.
//! - `sweep`: `--sweep`, msg/s and p99 over payload sizes × pairs.
//! - `two_process`: the `receiver` and `sender` subcommands.
//! - `cluster`: the `cluster` subcommand, membership convergence and
//!   failure detection.
//! - `sharding`: the `sharding` subcommand, the cost of `entity_ref`'s
//!   indirection and how shards move on leave, join and kill.
//! - `output`: what a single run prints after the reference lines
//!   (percentiles, drops, transport counters, ceiling, plot, JSON).

pub mod burst;
pub mod cluster;
pub mod compare;
pub mod output;
pub mod rate;
pub mod raw;
pub mod sharding;
pub mod sweep;
pub mod two_process;
