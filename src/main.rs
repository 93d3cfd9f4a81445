fn main() {
    std::process::exit(failover::cli::main());
}
