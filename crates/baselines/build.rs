//! Builds the PMDK shim (`csrc/pmdk_shim.c`) when the `pmdk` feature is on. Without the feature
//! this script does nothing, so the default build needs no system library.

use std::env;

fn main() {
    println!("cargo:rerun-if-changed=csrc/pmdk_shim.c");
    println!("cargo:rerun-if-changed=build.rs");
    if env::var_os("CARGO_FEATURE_PMDK").is_none() {
        return;
    }
    let probe = |name: &str| {
        pkg_config::Config::new().atleast_version("1.4").cargo_metadata(false).probe(name)
    };
    let obj = match probe("libpmemobj") {
        Ok(lib) => lib,
        Err(e) => {
            eprintln!(
                "the `pmdk` feature needs PMDK's libpmemobj and pkg-config: on Debian/Ubuntu \
                 `apt-get install libpmemobj-dev pkg-config` (or build without `--features pmdk`).\n\
                 pkg-config said: {e}"
            );
            std::process::exit(1);
        }
    };
    let pmem = match probe("libpmem") {
        Ok(lib) => lib,
        Err(e) => {
            eprintln!("the `pmdk` feature needs libpmem (comes with libpmemobj-dev): {e}");
            std::process::exit(1);
        }
    };
    let mut build = cc::Build::new();
    build.file("csrc/pmdk_shim.c").opt_level(2).warnings(true).extra_warnings(true);
    for p in obj.include_paths.iter().chain(&pmem.include_paths) {
        build.include(p);
    }
    // Compile the shim first, then name the shared libraries after it, so the linker resolves
    // the shim's references to them.
    build.compile("ferrite_pmdk_shim");
    for lib in [&obj, &pmem] {
        for p in &lib.link_paths {
            println!("cargo:rustc-link-search=native={}", p.display());
        }
        for l in &lib.libs {
            println!("cargo:rustc-link-lib={l}");
        }
    }
    println!("cargo:rustc-env=FERRITE_PMDK_VERSION={}", obj.version);
}
