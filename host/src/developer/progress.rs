//! What `pontoon bridge` tells its user while it works: each step on
//! stderr when stderr is a terminal (a script sees only the result line and
//! errors), always the outcome.

use std::io::IsTerminal;

#[derive(Clone, Copy)]
pub struct Progress {
    chatty: bool,
}

impl Progress {
    pub fn new(quiet: bool) -> Self {
        Self {
            chatty: !quiet && std::io::stderr().is_terminal(),
        }
    }

    /// A step under way.
    pub fn step(&self, what: impl std::fmt::Display) {
        if self.chatty {
            eprintln!("  {what}…");
        }
    }

    /// Something the user must know whether or not they watch.
    pub fn warn(&self, what: impl std::fmt::Display) {
        eprintln!("pontoon bridge: {what}");
    }
}
