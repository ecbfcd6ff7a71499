fn main() {
    print!("{}", handnode::config::help_table_markdown());
}
