//! `--plot`: throughput over time and the latency percentile curve, as a
//! dependency-free SVG.

use std::{fmt::Write as _, path::Path, time::Duration};

use anyhow::{Context, Result};

use crate::report::Report;

const W: f64 = 640.0;
const H: f64 = 260.0;
const PAD: f64 = 50.0;

/// Writes the two charts to `path`.
pub fn write_svg(path: &Path, windows: &[(Duration, u64)], latency: &Report) -> Result<()> {
    let mut svg = String::new();
    let total_h = 2.0 * H + 40.0;
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{total_h}" font-family="sans-serif" font-size="12">"#
    );
    // Throughput per progress window.
    let mut t = 0.0;
    let pts: Vec<(f64, f64)> = windows
        .iter()
        .map(|(d, n)| {
            t += d.as_secs_f64();
            (t, *n as f64 / d.as_secs_f64().max(1e-9))
        })
        .collect();
    chart(
        &mut svg,
        0.0,
        "throughput (msg/s) over time (s)",
        &pts,
        false,
    );
    // Latency by percentile, log-scaled percentile axis like HdrHistogram plots.
    let curve: Vec<(f64, f64)> = latency
        .curve()
        .into_iter()
        .map(|(p, us)| (-(1.0 - p / 100.0 + 1e-6).log10(), us as f64))
        .collect();
    chart(
        &mut svg,
        H + 40.0,
        "latency (us) by percentile (0 .. 99.999, log)",
        &curve,
        true,
    );
    svg.push_str("</svg>\n");
    std::fs::write(path, svg).with_context(|| format!("cannot write {}", path.display()))
}

fn chart(svg: &mut String, top: f64, title: &str, pts: &[(f64, f64)], _log_x: bool) {
    let _ = writeln!(svg, r#"<text x="{PAD}" y="{}">{title}</text>"#, top + 15.0);
    let (x0, y0, x1, y1) = (PAD, top + 25.0, W - 10.0, top + H - 20.0);
    let _ = writeln!(
        svg,
        r#"<rect x="{x0}" y="{y0}" width="{}" height="{}" fill="none" stroke="black"/>"#,
        x1 - x0,
        y1 - y0
    );
    if pts.is_empty() {
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}">no data (run shorter than one 500 ms window)</text>"#,
            x0 + 10.0,
            (y0 + y1) / 2.0
        );
        return;
    }
    let max_x = pts.iter().map(|p| p.0).fold(0.0, f64::max).max(1e-9);
    let max_y = pts.iter().map(|p| p.1).fold(0.0, f64::max).max(1.0);
    let mut line = String::new();
    for (x, y) in pts {
        let px = x0 + (x / max_x) * (x1 - x0);
        let py = y1 - (y / max_y) * (y1 - y0);
        let _ = write!(line, "{px:.1},{py:.1} ");
    }
    let _ = writeln!(
        svg,
        r#"<polyline fill="none" stroke="steelblue" stroke-width="2" points="{line}"/>"#
    );
    let _ = writeln!(svg, r#"<text x="2" y="{}">{max_y:.0}</text>"#, y0 + 10.0);
    let _ = writeln!(svg, r#"<text x="2" y="{y1}">0</text>"#);
}
