//! DREP, the disconnection reply (IBTA 12.6.11, table 113): the answer to a DREQ. Both sides
//! then wait out the timewait before their communication IDs may be used again.
//!
//! ```text
//!  0 local communication ID   4 remote communication ID   8 private data (224)
//! ```

ids_and_private_data_message!();
