//! The demo on a terminal: the narration on standard output (coloured only when it is a
//! terminal and `NO_COLOR` is not set), a progress bar on standard error for long transfers,
//! and with `--step` a pause after each step until Enter.

use std::io::{self, BufRead, Stdout, Write};

use anstream::AutoStream;
use indicatif::{ProgressBar, ProgressStyle};
use roce_demo::text::Text;
use roce_demo::{Beat, Observer};

pub struct Terminal {
    text: Text<AutoStream<Stdout>>,
    quiet: bool,
    pause: bool,
    bar: Option<ProgressBar>,
}

impl Terminal {
    pub fn new(quiet: bool, pause: bool) -> Terminal {
        Terminal {
            text: Text::new(anstream::stdout(), quiet),
            quiet,
            pause,
            bar: None,
        }
    }

    /// Waits for Enter; at the end of standard input, stops pausing.
    fn wait_for_enter(&mut self) {
        // A closed standard output must not end the demo with its target frozen.
        let mut out = io::stdout();
        let _ = write!(out, "   (Enter for the next step) ");
        let _ = out.flush();
        let mut line = String::new();
        if matches!(io::stdin().lock().read_line(&mut line), Ok(0) | Err(_)) {
            self.pause = false;
            let _ = writeln!(out);
        }
    }
}

impl Observer for Terminal {
    fn beat(&mut self, beat: &Beat) {
        self.text.beat(beat);
        if self.pause && *beat == Beat::EndOfStep {
            self.wait_for_enter();
        }
    }

    fn progress(&mut self, done: u64, total: u64) {
        if self.quiet {
            return;
        }
        // indicatif draws only when standard error is a terminal.
        let bar = self.bar.get_or_insert_with(|| {
            let bar = ProgressBar::new(total);
            if let Ok(style) = ProgressStyle::with_template(
                "   {bar:40} {bytes}/{total_bytes}  {bytes_per_sec}  {elapsed}",
            ) {
                bar.set_style(style);
            }
            bar
        });
        bar.set_position(done);
        if done >= total {
            bar.finish_and_clear();
        }
    }
}
