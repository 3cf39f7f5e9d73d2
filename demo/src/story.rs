//! A run told as a sequence of beats: steps, sentences with the real values, packets, the
//! NICs' decisions, the target's memory, proof lines. A scenario only says what happened; an
//! [`Observer`] decides how it looks (the terminal's text, or nothing but the proof lines), and
//! the beats are kept for the HTML page.

use crate::events::NicEvent;
use crate::wire::Seen;

/// One thing the demo tells.
#[derive(Debug, Clone, PartialEq)]
pub enum Beat {
    /// A numbered step begins.
    Step { number: u32, title: String },
    /// A sentence, with the real values in it.
    Say(String),
    /// Names and values, shown aligned (a work request, the keys a host shares).
    Table(Vec<(String, String)>),
    /// A frame on the wire, field by field; `full` with its Ethernet, IP and UDP headers.
    Packet { frame: Seen, full: bool },
    /// A frame in one line.
    PacketLine(Seen),
    /// A NIC's decision, as it logged it.
    Decision(NicEvent),
    /// The target's memory from `base`, before and after (same length).
    Memory {
        base: u64,
        before: Vec<u8>,
        after: Vec<u8>,
    },
    /// Something checked, and whether it held.
    Proof { held: bool, text: String },
    /// Figures measured, named in snake_case with their unit (`on_cpu_ns`), for scripts
    /// (`roce demo --json`); the narration tells the same in words.
    Figures(serde_json::Map<String, serde_json::Value>),
    /// The step is over: `--step` waits here.
    EndOfStep,
}

/// What the beats are told to, as they happen.
pub trait Observer {
    fn beat(&mut self, beat: &Beat);

    /// A long transfer has moved `done` of `total` bytes.
    fn progress(&mut self, _done: u64, _total: u64) {}
}

/// The beats of a run: told to an observer at once, and kept.
pub struct Story<'o> {
    observer: &'o mut dyn Observer,
    beats: Vec<Beat>,
    steps: u32,
}

impl<'o> Story<'o> {
    pub fn new(observer: &'o mut dyn Observer) -> Story<'o> {
        Story {
            observer,
            beats: Vec::new(),
            steps: 0,
        }
    }

    pub fn tell(&mut self, beat: Beat) {
        self.observer.beat(&beat);
        self.beats.push(beat);
    }

    /// Ends the step in progress, if any, and begins the next.
    pub fn step(&mut self, title: impl Into<String>) {
        self.end_step();
        self.steps += 1;
        self.tell(Beat::Step {
            number: self.steps,
            title: title.into(),
        });
    }

    /// Ends the step in progress, if any.
    pub fn end_step(&mut self) {
        if self.steps > 0 && self.beats.last() != Some(&Beat::EndOfStep) {
            self.tell(Beat::EndOfStep);
        }
    }

    pub fn say(&mut self, text: impl Into<String>) {
        self.tell(Beat::Say(text.into()));
    }

    pub fn table(&mut self, rows: &[(&str, String)]) {
        let rows = rows
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect();
        self.tell(Beat::Table(rows));
    }

    /// Tells a proof line; returns whether it held.
    pub fn proof(&mut self, held: bool, text: impl Into<String>) -> bool {
        self.tell(Beat::Proof {
            held,
            text: text.into(),
        });
        held
    }

    /// Tells figures, given as a JSON object (anything else is not figures, and dropped).
    pub fn figures(&mut self, figures: serde_json::Value) {
        if let serde_json::Value::Object(map) = figures {
            self.tell(Beat::Figures(map));
        }
    }

    pub fn progress(&mut self, done: u64, total: u64) {
        self.observer.progress(done, total);
    }

    pub fn beats(&self) -> &[Beat] {
        &self.beats
    }

    /// The proof lines told so far.
    pub fn proofs(&self) -> impl Iterator<Item = (bool, &str)> {
        self.beats.iter().filter_map(|b| match b {
            Beat::Proof { held, text } => Some((*held, text.as_str())),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Seen(Vec<Beat>);

    impl Observer for Seen {
        fn beat(&mut self, beat: &Beat) {
            self.0.push(beat.clone());
        }
    }

    #[test]
    fn steps_are_numbered_and_closed_once() {
        let mut seen = Seen::default();
        let mut story = Story::new(&mut seen);
        story.say("before any step");
        story.step("one");
        story.proof(true, "it held");
        story.step("two");
        story.figures(serde_json::json!({"figures": "x", "on_cpu_ns": 5}));
        story.figures(serde_json::json!(["not", "figures"]));
        story.end_step();
        story.end_step();
        let kept = story.beats().to_vec();
        assert_eq!(story.proofs().collect::<Vec<_>>(), [(true, "it held")]);
        assert_eq!(seen.0, kept);
        assert_eq!(
            kept,
            [
                Beat::Say("before any step".into()),
                Beat::Step {
                    number: 1,
                    title: "one".into()
                },
                Beat::Proof {
                    held: true,
                    text: "it held".into()
                },
                Beat::EndOfStep,
                Beat::Step {
                    number: 2,
                    title: "two".into()
                },
                Beat::Figures(
                    serde_json::json!({"figures": "x", "on_cpu_ns": 5})
                        .as_object()
                        .unwrap()
                        .clone()
                ),
                Beat::EndOfStep,
            ]
        );
    }
}
