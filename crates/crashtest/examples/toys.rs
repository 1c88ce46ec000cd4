//! Runs every registered toy once and prints its report (`cargo run -p ferrite-crashtest --example toys`).
fn main() {
    let out = std::env::temp_dir().join("ferrite-crashtest-example");
    for t in ferrite_crashtest::registry() {
        let r =
            t.explore(&ferrite_crashtest::Config { out_dir: out.clone(), ..Default::default() });
        print!("{r}");
    }
}
