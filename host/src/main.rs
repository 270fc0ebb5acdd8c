//! The `trainforge` binary: a thin shell over [`trainforge::cmd`].

use std::process::ExitCode;

/// mimalloc instead of glibc malloc: the operator's heap peaks while
/// Cranelift compiles plugins (hundreds of MB of short-lived allocations on
/// compiler threads); glibc kept most of that resident for the process's
/// life (measured: 620 MiB RSS after start + 300 TrainJobs), mimalloc
/// returns freed pages to the OS.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    no_transparent_huge_pages();
    trainforge::cmd::main()
}

/// Transparent huge pages off for this process and the compile workers it
/// starts (the setting is inherited). mimalloc asks for huge pages on its
/// arenas, and the kernel then backs each touched 2 MiB of a mostly empty
/// arena in full: with them the idle operator was 74 MiB resident and 121 MiB
/// at its peak over 300 TrainJobs, without them 43 and 72 MiB (`make
/// bench`), at no measurable CPU cost. mimalloc is also built without its
/// huge-page request (`no_thp`); this covers kernels set to `always`, which
/// give huge pages unasked. A kernel without the setting keeps its default.
fn no_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_thp_disable(true);
}
