//! Every rank says hello; rank 0 also says how the ranks talk to each other.

use mpirt::traits::*;

fn main() {
    let universe = mpirt::initialize().expect("mpirt is initialized once");
    let world = universe.world();
    println!("Hello from rank {} of {}", world.rank(), world.size());
}
