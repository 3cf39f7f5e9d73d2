//! The closing summary: packets per opcode, bad ICRCs, malformed and other traffic.

use roce_wire::Opcode;

pub struct Tally {
    /// Indexed by opcode byte.
    per_opcode: [u64; 256],
    bad_icrc: u64,
    malformed: u64,
    not_roce: u64,
}

impl Default for Tally {
    fn default() -> Tally {
        Tally {
            per_opcode: [0; 256],
            bad_icrc: 0,
            malformed: 0,
            not_roce: 0,
        }
    }
}

impl Tally {
    pub fn roce(&mut self, opcode: Opcode, icrc_ok: bool) {
        self.per_opcode[usize::from(opcode.value())] += 1;
        if !icrc_ok {
            self.bad_icrc += 1;
        }
    }

    /// Adds another tally's counts.
    pub fn add(&mut self, other: &Tally) {
        for (mine, theirs) in self.per_opcode.iter_mut().zip(&other.per_opcode) {
            *mine += theirs;
        }
        self.bad_icrc += other.bad_icrc;
        self.malformed += other.malformed;
        self.not_roce += other.not_roce;
    }

    pub fn malformed(&mut self) {
        self.malformed += 1;
    }

    pub fn not_roce(&mut self) {
        self.not_roce += 1;
    }

    /// No bad ICRC and no malformed packet: what `--strict` asks for.
    pub fn clean(&self) -> bool {
        self.bad_icrc == 0 && self.malformed == 0
    }

    /// The closing lines: the packets by kind, then by opcode.
    pub fn summary(&self) -> String {
        let roce: u64 = self.per_opcode.iter().sum();
        let total = roce + self.malformed + self.not_roce;
        let mut text = format!(
            "{total} packets: {roce} RoCE, {} malformed, {} not RoCE (skipped); {} bad ICRC\n",
            self.malformed, self.not_roce, self.bad_icrc
        );
        for op in Opcode::all() {
            let count = self.per_opcode[usize::from(op.value())];
            if count > 0 {
                text.push_str(&format!("{count:>9}  {op}\n"));
            }
        }
        text
    }
}
