//! weft-io: the event loop and everything that touches the kernel.
//!
//! - [`sys`]: every system call weft makes, wrapped and counted by kind per
//!   thread (the only module in the workspace with `unsafe`);
//! - [`backend`]: the event mechanisms behind one [`Poller`] trait, each
//!   declaring its [`Caps`] (select, poll, epoll variants, io_uring, and
//!   `tracked`, the user-level readiness table over one of them);
//! - [`event_loop`]: the generic loop ([`run`]) with its [`Ctx`] (cached clock,
//!   timers, deferred close) and the [`Handler`] callbacks;
//! - [`Slab`]: connection table whose [`Token`]s carry a generation;
//! - [`workers`]: SO_REUSEPORT listener groups and signal-driven shutdown;
//! - [`group`]: a role's worker threads started, joined and their counters
//!   summed as one ([`WorkerGroup`]);
//! - [`input`]: a connection's input bytes ([`InputBuf`]), storage lent from a
//!   per-worker [`BufPool`] only while bytes are pending;
//! - [`output`]: a connection's output chain ([`OutChain`]): own bytes, shared
//!   buffers, file ranges and pipe segments sent with the fewest system calls;
//! - [`mailbox`]: helper threads' results for each worker, behind an eventfd;
//! - [`mapcache`]: files mapped in chunks, inactive chunks unmapped lazily in
//!   LRU order (Flash's mapped-file cache);
//! - [`helpers`]: AMPED helper threads started on demand for the work a loop
//!   must not wait for (open, stat, read-ahead), reporting through a mailbox;
//! - [`features`]: what this kernel supports (`weft backends`);
//! - [`pipes`]: pipes for splice and tee, pooled per worker under a global cap;
//! - [`admin`]: the `--admin` JSON endpoint's listener thread;
//! - [`accept`]: the accept pass every listener handler runs (limit, pause
//!   when out of descriptors);
//! - [`bound`]: a started role's addresses and stop switch ([`Bound`]);
//! - [`door`]: a worker's listener, accept pass and shutdown waker as one
//!   ([`Door`]), the events every role handles alike.
//! - [`handoff`]: the messages `weft front --mode handoff` and `weft serve
//!   --handoff-socket` exchange on their Unix socket (connections handed
//!   over, closed, given back).
//! - [`pools`]: a worker's two buffer pools seen together: what they hold
//!   ([`PoolGauges`], one gauge group every role embeds in its stats) and a
//!   connection's buffers given back to them;
//! - [`records`]: connection records lent from a per-worker pool
//!   ([`RecordPool`]) while a connection is busy, so an idle one keeps only a
//!   small record inline in its slot and a request allocates none;
//! - [`statefile`]: files other programs poll for (ready, pid), written
//!   whole or not at all;
//! - [`timer`]: a connection's deadline against the loop's timer heap
//!   (arm only when it moves earlier; stale, later or expired when it fires).

pub mod accept;
pub mod admin;
pub mod backend;
pub mod bound;
pub mod door;
pub mod event_loop;
pub mod features;
pub mod group;
pub mod handoff;
pub mod helpers;
pub mod input;
pub mod logfile;
pub mod mailbox;
pub mod mapcache;
pub mod output;
pub mod pipes;
pub mod pools;
pub mod records;
pub mod slab;
pub mod statefile;
pub mod sys;
pub mod timer;
pub mod workers;

#[cfg(test)]
mod testutil;

pub use accept::Acceptor;
pub use backend::{BackendKind, BackendOptions, Caps, Event, Interest, Poller, Readiness, Token, TrackerStats};
pub use bound::Bound;
pub use door::Door;
pub use event_loop::{run, Ctx, Handler, RegisterError};
pub use group::{GroupStats, WorkerGroup, WorkerSeat};
pub use input::{must_linger, BufPool, Fill, InputBuf, Linger, LINGER_MAX, LINGER_TIME};
pub use mailbox::Mailboxes;
pub use output::{FileSend, Flushed, OutChain, OwnPool};
pub use pipes::{Pipe, PipeBudget, PipeError, PipePool};
pub use pools::PoolGauges;
pub use records::RecordPool;
pub use slab::Slab;
pub use sys::{Fd, SysCounts, SysKind};
pub use workers::{bind_reuseport, Shutdown};
