//! Runs one registered target with the default configuration and prints its report:
//! `cargo run -p ferrite-crashtest --example one -- NAME`.
fn main() {
    let name = std::env::args().nth(1).unwrap_or_else(|| "toy-early-store".into());
    let Some(t) = ferrite_crashtest::find(&name) else {
        eprintln!("no target {name}");
        std::process::exit(2);
    };
    let out = std::env::temp_dir().join("ferrite-crashtest-example");
    let r = t.explore(&ferrite_crashtest::Config { out_dir: out, ..Default::default() });
    print!("{r}");
}
