//! Where perftest's messages go in memory. Each side's buffer has two halves of at least one
//! "cycle buffer" (a page, the larger of both sides'): it sends from the first and offers the
//! second to the peer. In bandwidth tests, messages of at most half a cycle buffer walk
//! through it in cache-line-aligned steps and wrap around; larger ones and latency tests reuse
//! the start.

/// Sizes both sides agreed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub size: u64,
    /// The larger page size of the two sides.
    pub cycle: u64,
    /// The larger cache line of the two sides.
    pub cache_line: u64,
}

impl Layout {
    /// One half of the buffer: the message, or the cycle buffer if that is larger.
    pub fn half(&self) -> u64 {
        self.size.max(self.cycle)
    }

    /// Bytes between two messages that walk the buffer: the size rounded up to cache lines.
    pub fn step(&self) -> u64 {
        if self.size > self.cache_line {
            self.size.next_multiple_of(self.cache_line)
        } else {
            self.cache_line
        }
    }

    /// The whole buffer: both halves, each rounded up to cache lines.
    pub fn buffer_len(&self) -> u64 {
        2 * self.half().next_multiple_of(self.cache_line)
    }

    /// Where the half the peer may use starts.
    pub fn peer_half(&self) -> u64 {
        self.half()
    }

    /// How many places messages take in turn in a bandwidth test (1 when they do not walk).
    pub fn places(&self) -> u64 {
        if self.size <= self.cycle / 2 {
            self.cycle / self.step()
        } else {
            1
        }
    }

    /// The offset (within a half) of message `n` of a bandwidth test.
    pub fn place(&self, n: u64) -> u64 {
        (n % self.places()) * self.step()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_messages_walk_a_page_in_cache_lines_and_large_ones_stay_put() {
        let atomic = Layout {
            size: 8,
            cycle: 4096,
            cache_line: 64,
        };
        assert_eq!((atomic.step(), atomic.places()), (64, 64));
        assert_eq!(atomic.place(65), 64);
        assert_eq!(atomic.buffer_len(), 8192);
        assert_eq!(atomic.peer_half(), 4096);

        let odd = Layout {
            size: 1000,
            ..atomic
        };
        assert_eq!((odd.step(), odd.places()), (1024, 4));
        assert_eq!(odd.place(5), 1024);

        let big = Layout {
            size: 100_000,
            ..atomic
        };
        assert_eq!((big.places(), big.place(7)), (1, 0));
        assert_eq!(big.half(), 100_000);
        assert_eq!(big.buffer_len(), 2 * 100_032);
    }
}
