//! OSU micro-benchmark options and output format.
