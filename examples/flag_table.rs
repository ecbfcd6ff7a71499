fn main() {
    print!("{}", handnode::cli::help_table_markdown());
}
