//! RTU, ready to use (IBTA 12.6.9, table 111): the active side's last word of the handshake.
//! After it both QPs may send; before it, the passive side treats the first packet that arrives
//! on its QP as an RTU.
//!
//! ```text
//!  0 local communication ID   4 remote communication ID   8 private data (224)
//! ```

ids_and_private_data_message!();
