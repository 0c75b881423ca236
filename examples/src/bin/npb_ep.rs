//! NPB EP, the embarrassingly parallel kernel: pairs of uniform random numbers become Gaussian
//! deviates by the Marsaglia polar method; the sums of the deviates and their counts in square
//! annuli are checked against NPB's published sums.
//!
//!   npb_ep CLASS     (S, W, A or B; any number of processes)

use std::process::ExitCode;

use examples::npb::{self, multiply, power, Randlc, Summary, MULTIPLIER};
use mpirt::collective::SystemOperation;
use mpirt::traits::*;

/// log2 of the pairs in a batch: each batch starts from a seed computed by jumping ahead, so
/// ranks split the batches among themselves and together draw NPB's single stream.
const BATCH_LOG2: u32 = 16;
const BATCH: u64 = 1 << BATCH_LOG2;
/// The annuli counted: deviate pairs with max(|x|, |y|) in [l, l + 1), l < 10.
const ANNULI: usize = 10;
const SEED: u64 = 271_828_183;
/// NPB's tolerance on the relative error of the sums.
const EPSILON: f64 = 1e-8;

fn main() -> ExitCode {
    let Some(class) = npb::class_or_usage("npb_ep") else {
        return ExitCode::FAILURE;
    };
    // log2 of the number of pairs, and NPB's sums of the X and Y deviates.
    let (m, sx_reference, sy_reference) = match class {
        'S' => (24, -3.24783465203474e3, -6.958407078382297e3),
        'W' => (25, -2.863319731645753e3, -6.320053679109499e3),
        'A' => (28, -4.295875165629892e3, -1.580732573678431e4),
        _ => (30, 4.033815542441498e4, -2.660669192809235e4),
    };
    let universe = mpirt::initialize().expect("mpirt is initialized once");
    let world = universe.world();
    let (rank, size) = (world.rank() as u64, world.size() as u64);

    let batches = 1u64 << (m - BATCH_LOG2);
    let (share, extra) = (batches / size, batches % size);
    let first = rank * share + rank.min(extra);
    let mine = share + u64::from(rank < extra);
    // A batch consumes 2 * BATCH numbers of the stream.
    let batch_step = power(MULTIPLIER, 2 * BATCH);

    world.barrier();
    let start = mpirt::time();
    let mut sums = [0.0f64; 2];
    let mut counts = [0.0f64; ANNULI];
    for batch in first..first + mine {
        let mut stream = Randlc::new(multiply(SEED, power(batch_step, batch)), MULTIPLIER);
        for _ in 0..BATCH {
            let x = 2.0 * stream.next_f64() - 1.0;
            let y = 2.0 * stream.next_f64() - 1.0;
            let t = x * x + y * y;
            if t <= 1.0 {
                let scale = (-2.0 * t.ln() / t).sqrt();
                let (gx, gy) = (x * scale, y * scale);
                counts[gx.abs().max(gy.abs()) as usize] += 1.0;
                sums[0] += gx;
                sums[1] += gy;
            }
        }
    }
    let mut total_sums = [0.0f64; 2];
    let mut total_counts = [0.0f64; ANNULI];
    world.all_reduce_into(&sums[..], &mut total_sums[..], SystemOperation::sum());
    world.all_reduce_into(&counts[..], &mut total_counts[..], SystemOperation::sum());
    let seconds = npb::slowest(&world, mpirt::time() - start);
    if rank != 0 {
        return ExitCode::SUCCESS;
    }

    let [sx, sy] = total_sums;
    let relative = |value: f64, reference: f64| ((value - reference) / reference).abs();
    let verified = relative(sx, sx_reference) <= EPSILON && relative(sy, sy_reference) <= EPSILON;
    println!(" EP Benchmark Results:");
    println!(" N = 2^{m:5}");
    println!(
        " No. Gaussian Pairs = {:15.0}",
        total_counts.iter().sum::<f64>()
    );
    println!(" Sums = {sx:25.15e} {sy:25.15e}");
    println!(" Counts:");
    for (annulus, count) in total_counts.iter().enumerate() {
        println!("{annulus:3}{count:15.0}");
    }
    let numbers = 2.0 * (1u64 << m) as f64;
    Summary {
        name: "EP",
        class,
        size: format!("{}", 1u64 << (m + 1)),
        iterations: 0,
        seconds,
        processes: size as i32,
        mops: numbers / seconds / 1e6,
        operation: "Random numbers generated",
        verified,
    }
    .report()
}
