fn main() {
    print!("{}", handnode::ops::cli::help_table_markdown());
}
