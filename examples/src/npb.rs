//! What the NAS Parallel Benchmark kernels (`npb_*`) share: NPB's random number generator,
//! the problem class on the command line, and the summary block NPB prints at the end.

use std::fmt::Display;
use std::process::ExitCode;

use mpirt::collective::SystemOperation;
use mpirt::traits::*;

/// The multiplier `a = 5^13` of NPB's generator `x' = a x mod 2^46`.
pub const MULTIPLIER: u64 = 1_220_703_125;

const MODULUS_MASK: u64 = (1 << 46) - 1;

/// `a * b mod 2^46`. NPB computes it exactly in doubles by splitting the factors into 23-bit
/// halves; wrapping 64-bit arithmetic gives the same residue, because 2^46 divides 2^64.
pub fn multiply(a: u64, b: u64) -> u64 {
    a.wrapping_mul(b) & MODULUS_MASK
}

/// `a^n mod 2^46`, by squaring: how NPB jumps ahead `n` steps in a stream.
pub fn power(mut a: u64, mut n: u64) -> u64 {
    let mut result = 1;
    while n > 0 {
        if n & 1 == 1 {
            result = multiply(result, a);
        }
        a = multiply(a, a);
        n >>= 1;
    }
    result
}

/// NPB's `randlc`: a stream of uniform numbers in (0, 1), bit for bit those of NPB's code.
#[derive(Clone, Debug)]
pub struct Randlc {
    seed: u64,
    multiplier: u64,
}

impl Randlc {
    pub fn new(seed: u64, multiplier: u64) -> Self {
        Randlc { seed, multiplier }
    }

    /// Advances the stream and returns the new seed scaled by 2^-46 (exact: seeds are < 2^46).
    pub fn next_f64(&mut self) -> f64 {
        self.seed = multiply(self.multiplier, self.seed);
        self.seed as f64 * (1.0 / (1u64 << 46) as f64)
    }
}

/// The class named by the program's only argument, if it is one of `classes`; otherwise the
/// usage line to print.
fn class_argument(program: &str, classes: &[char]) -> Result<char, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = || {
        let names: Vec<String> = classes.iter().map(char::to_string).collect();
        format!("usage: {program} CLASS   (CLASS: {})", names.join(", "))
    };
    match args.as_slice() {
        [class] => {
            let mut chars = class.chars();
            match (chars.next().map(|c| c.to_ascii_uppercase()), chars.next()) {
                (Some(c), None) if classes.contains(&c) => Ok(c),
                _ => Err(usage()),
            }
        }
        _ => Err(usage()),
    }
}

/// The class named by the program's only argument (S, W, A or B); otherwise prints the usage
/// line and gives `None`.
pub fn class_or_usage(program: &str) -> Option<char> {
    class_argument(program, &['S', 'W', 'A', 'B'])
        .map_err(|usage| eprintln!("{usage}"))
        .ok()
}

/// Whether the job has a power-of-two number of processes, as NPB's IS, CG and MG require;
/// every process refuses otherwise, and rank 0 says why.
pub fn power_of_two_or_refuse<C: Communicator>(program: &str, comm: &C) -> bool {
    match power_of_two_processes(program, comm.size()) {
        Ok(()) => true,
        Err(message) => {
            if comm.rank() == 0 {
                eprintln!("{message}");
            }
            false
        }
    }
}

/// The longest time any rank took: NPB reports the slowest process.
pub fn slowest<C: Communicator>(comm: &C, seconds: f64) -> f64 {
    let mut max = 0.0;
    comm.all_reduce_into(&seconds, &mut max, SystemOperation::max());
    max
}

/// What NPB's `print_results` reports at the end of a run.
pub struct Summary<'a> {
    pub name: &'a str,
    pub class: char,
    pub size: String,
    pub iterations: u32,
    pub seconds: f64,
    pub processes: i32,
    pub mops: f64,
    pub operation: &'a str,
    pub verified: bool,
}

impl Summary<'_> {
    /// Prints NPB's summary block (rank 0 calls it) and gives the exit status: failure unless
    /// the run verified.
    pub fn report(&self) -> ExitCode {
        fn line(key: &str, value: impl Display) {
            println!(" {key:<16}={value:>25}");
        }
        println!();
        println!(" {} Benchmark Completed.", self.name);
        line("Class", self.class);
        line("Size", &self.size);
        line("Iterations", self.iterations);
        line("Time in seconds", format!("{:.2}", self.seconds));
        line("Total processes", self.processes);
        line("Mop/s total", format!("{:.2}", self.mops));
        line(
            "Mop/s/process",
            format!("{:.2}", self.mops / f64::from(self.processes)),
        );
        line("Operation type", self.operation);
        line(
            "Verification",
            if self.verified {
                "SUCCESSFUL"
            } else {
                "UNSUCCESSFUL"
            },
        );
        if self.verified {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }
    }
}

/// Checks that `size` is a power of two, as NPB's IS and CG require; the error says so.
fn power_of_two_processes(program: &str, size: i32) -> Result<(), String> {
    if size > 0 && (size as u32).is_power_of_two() {
        Ok(())
    } else {
        Err(format!(
            "{program} needs a power-of-two number of processes (1, 2, 4, 8, ...), got {size}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn randlc_matches_npb_first_values() {
        // x1 = a * 314159265 mod 2^46, computed independently with 128-bit integers.
        let mut stream = Randlc::new(314_159_265, MULTIPLIER);
        let expected = (314_159_265u128 * MULTIPLIER as u128) % (1u128 << 46);
        let r = stream.next_f64();
        assert_eq!(r, expected as f64 / (1u64 << 46) as f64);
        assert!(r > 0.0 && r < 1.0);
    }

    #[test]
    fn power_jumps_ahead_like_stepping() {
        let mut stepped = Randlc::new(271_828_183, MULTIPLIER);
        for _ in 0..1000 {
            stepped.next_f64();
        }
        let jumped = multiply(271_828_183, power(MULTIPLIER, 1000));
        assert_eq!(stepped.seed, jumped);
    }
}
