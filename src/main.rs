// mimalloc: measured in benches/README.md ("Gateway"); the library leaves
// the allocator to whoever embeds it.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(failover::cli::main());
}
