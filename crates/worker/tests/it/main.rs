//! Integration tests of the worker (one test binary, as the style guide asks): the HTTP sink
//! against a real loopback server, and three steps of the tiny loop with the real sandbox and
//! the real policy; the checkpoint cadence (`run.weights_every`) with a crash between writes.

mod broken_in_play;
mod judge;
mod learning;
mod loop_tiny;
mod sink_http;
mod weights_cadence;
