//! Progress bars for long runs (`--sweep`, `--compare N`), drawn on stderr
//! only when stderr is a terminal: piped or redirected, a run prints
//! exactly what it printed before. Report lines go to stdout through
//! [`Progress::println`], which lifts the bar out of the way, so the lines
//! are the same bytes with or without it.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar over `len` steps, or a hidden one.
#[derive(Debug)]
pub struct Progress {
    bar: ProgressBar,
    /// Whether this run decided to draw it (indicatif also draws nothing
    /// when its target is not a terminal); read by the tests.
    #[cfg_attr(not(test), allow(dead_code))]
    drawn: bool,
}

impl Progress {
    /// A bar over `len` steps, drawn only if stderr is a terminal.
    pub fn new(len: u64) -> Self {
        use std::io::IsTerminal;
        Self::drawn_if(len, std::io::stderr().is_terminal())
    }

    /// A bar drawn on stderr if `terminal`, else hidden.
    pub fn drawn_if(len: u64, terminal: bool) -> Self {
        if !terminal {
            return Self {
                bar: ProgressBar::hidden(),
                drawn: false,
            };
        }
        let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
        if let Ok(style) =
            ProgressStyle::with_template("{bar:30} {pos}/{len} {elapsed_precise} {msg}")
        {
            bar.set_style(style);
        }
        Self { bar, drawn: true }
    }

    /// Whether the bar is drawn at all.
    #[cfg(test)]
    pub fn is_drawn(&self) -> bool {
        self.drawn
    }

    /// What the step now running is.
    pub fn step(&self, what: String) {
        self.bar.set_message(what);
    }

    /// One step done.
    pub fn done_one(&self) {
        self.bar.inc(1);
    }

    /// Prints `line` on stdout, the bar lifted out of its way.
    pub fn println(&self, line: &str) {
        self.bar.suspend(|| println!("{line}"));
    }

    /// Removes the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bar_is_drawn_on_a_terminal_only() {
        assert!(!Progress::drawn_if(3, false).is_drawn());
        let drawn = Progress::drawn_if(3, true);
        assert!(drawn.is_drawn());
        drawn.finish();
    }
}
