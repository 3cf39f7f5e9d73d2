//! The boilerplate every fixed-size header view shares, in the style of smoltcp's `wire` module:
//! a `Packet<T>` over any byte buffer, checked once, then read and written through accessors.

/// Declares `HEADER_LEN` and a `Packet<T>` view for a fixed-size header of `$layer`.
macro_rules! fixed_header_view {
    ($layer:expr, $len:expr) => {
        /// Size of this header in bytes.
        pub const HEADER_LEN: usize = $len;

        /// A zero-copy view of this header over a byte buffer.
        #[derive(Debug, Clone)]
        pub struct Packet<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> Packet<T> {
            /// Wraps a buffer without checking its length; accessors may panic on a short one.
            pub const fn new_unchecked(buffer: T) -> Packet<T> {
                Packet { buffer }
            }

            /// Wraps a buffer after checking that it holds the whole header.
            pub fn new_checked(buffer: T) -> Result<Packet<T>, crate::Error> {
                let packet = Packet::new_unchecked(buffer);
                packet.check_len()?;
                Ok(packet)
            }

            /// Ensures no accessor will panic.
            pub fn check_len(&self) -> Result<(), crate::Error> {
                crate::error::check_len($layer, HEADER_LEN, self.buffer.as_ref().len())
            }

            pub fn into_inner(self) -> T {
                self.buffer
            }

            fn bytes(&self) -> &[u8] {
                self.buffer.as_ref()
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
            fn bytes_mut(&mut self) -> &mut [u8] {
                self.buffer.as_mut()
            }
        }
    };
}

pub(crate) use fixed_header_view;
