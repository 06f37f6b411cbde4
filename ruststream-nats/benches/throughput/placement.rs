//! `--placement`: which CPUs the server and the bench run on.
//!
//! On a machine of few CPUs the one-at-a-time rows (`request`, `js-reply-stored`) measure the
//! scheduler as much as the code: one message is a hand-off from the service to the server and
//! back, and whether the two run on one CPU (a context switch) or on two (waking an idle CPU,
//! which in a virtual machine goes through the hypervisor) changes the rate threefold. Left to
//! the scheduler, that choice changes from round to round. `apart` and `shared` fix it.
//!
//! A thread's CPU mask is inherited by the threads and processes it starts. So the main thread
//! takes the server's CPUs, starts the server, then takes the bench's before the runtime (or
//! anything else) starts a thread.

use crate::args::Placement;

/// The CPUs of each, by the ids this process may run on.
pub struct Cpus {
    pub server: Vec<usize>,
    pub bench: Vec<usize>,
}

/// Where each runs under `placement`; `None` when the scheduler decides.
///
/// # Panics
///
/// `apart` with fewer than two CPUs to run on.
pub fn cpus(placement: Placement) -> Option<Cpus> {
    match placement {
        Placement::Free => None,
        Placement::Apart => {
            let allowed = allowed();
            let (server, bench) = allowed
                .split_last()
                .filter(|(_, bench)| !bench.is_empty())
                .unwrap_or_else(|| {
                    panic!(
                        "--placement apart needs two CPUs to run on, this process may use {allowed:?}"
                    )
                });
            Some(Cpus {
                server: vec![*server],
                bench: bench.to_vec(),
            })
        }
        Placement::Shared => {
            let first = vec![allowed()[0]];
            Some(Cpus {
                server: first.clone(),
                bench: first,
            })
        }
    }
}

/// The calling thread, and every thread and process it starts from now on, run on `cpus` only.
#[cfg(target_os = "linux")]
pub fn pin(cpus: &[usize]) {
    // SAFETY: `cpu_set_t` is plain data (all zeros is the empty set); `CPU_SET` writes within
    // it for ids below `CPU_SETSIZE` (checked), and `sched_setaffinity` reads `size_of` bytes.
    let result = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &cpu in cpus {
            assert!(
                cpu < libc::CPU_SETSIZE as usize,
                "CPU {cpu} is beyond what a CPU set holds"
            );
            libc::CPU_SET(cpu, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &raw const set)
    };
    assert!(
        result == 0,
        "cannot run on CPUs {cpus:?}: {}",
        std::io::Error::last_os_error()
    );
}

/// The ids of the CPUs this process may run on (a `taskset` around the bench narrows them).
#[cfg(target_os = "linux")]
fn allowed() -> Vec<usize> {
    // SAFETY: as in `pin`; `sched_getaffinity` writes at most `size_of` bytes into `set`, and
    // `CPU_ISSET` reads within it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let result =
            libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &raw mut set);
        assert!(
            result == 0,
            "cannot read this process's CPUs: {}",
            std::io::Error::last_os_error()
        );
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&cpu| libc::CPU_ISSET(cpu, &set))
            .collect()
    }
}

#[cfg(not(target_os = "linux"))]
pub fn pin(_cpus: &[usize]) {
    panic!("--placement apart and shared need Linux (sched_setaffinity)");
}

#[cfg(not(target_os = "linux"))]
fn allowed() -> Vec<usize> {
    panic!("--placement apart and shared need Linux (sched_getaffinity)");
}
