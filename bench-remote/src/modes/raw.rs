//! `--raw`: the burst pattern over `transport` frames, no actors (the
//! pattern's driver is `crate::raw`); prints what the default mode prints.

use anyhow::Result;
use tokio::runtime::Handle;
use transport::TransportConfig;

use crate::{
    RunOpts,
    modes::output::{Run, finish},
};

/// Runs the pattern once over the transport and prints the details.
pub async fn run(recv: &Handle, opts: &RunOpts, config: TransportConfig) -> Result<()> {
    let shape = opts.shape();
    let r = crate::raw::run(recv, shape, config, true).await?;
    let run = Run {
        mode: "raw-transport",
        sent: shape.messages + shape.burst,
        received: r.received,
        outcome: r.outcome,
        stats: r.stats,
    };
    finish(recv, opts, run).await
}
