fn main() -> std::process::ExitCode {
    ruleop::cli::main()
}
