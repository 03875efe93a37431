//! The size of the thread pool that kernels run on.

use crate::{Result, TensorError};

/// Sets how many threads kernels use, counting the calling thread: like an OpenMP team, the
/// caller becomes worker 0 and runs its share of every parallel kernel instead of handing the
/// work over and sleeping (which costs a wake-up per op). Call it once, from the thread that
/// will run the tensor code, before the first parallel kernel; later calls fail unless they
/// ask for the size already in force.
pub fn set_num_threads(n: usize) -> Result<()> {
    let n = n.max(1);
    match rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .use_current_thread()
        .build_global()
    {
        Ok(()) => Ok(()),
        Err(_) if rayon::current_num_threads() == n => Ok(()),
        Err(e) => Err(TensorError::invalid(
            "set_num_threads",
            format!(
                "the thread pool already runs {} threads: {e}",
                rayon::current_num_threads()
            ),
        )),
    }
}

/// How many threads kernels use.
pub fn num_threads() -> usize {
    rayon::current_num_threads()
}
