/// jemalloc: fewer cycles per allocation than the system allocator on the reconcile path
/// (JSON trees are built and dropped for every watch event and write) and less
/// fragmentation across threads, so a lower peak RSS with thousands of cached objects
/// (measured in BENCHMARKS.md against glibc's malloc and mimalloc).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    ruleop::cli::main()
}
