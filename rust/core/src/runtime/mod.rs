//! What the core needs of the machine it runs on, below every other layer: a thread pool per
//! process (`parallel`), who this process is across forks (`process`), the OS's calls that differ
//! between Linux, macOS and Windows (`platform`), and a hint to the CPU's cache (`prefetch`).

pub mod parallel;
pub mod platform;
pub(crate) mod prefetch;
pub mod process;
