//! `cfg(vector)`: the kernels' vector paths are compiled in (x86-64 with AVX2, FMA and F16C,
//! which wick's `target-cpu=native` build enables on any machine that has them); `cfg(wide)`:
//! the AVX-512 level's 512-bit paths as well (AVX-512 F, BW, DQ, VL and VNNI besides).
fn main() {
    println!("cargo::rustc-check-cfg=cfg(vector)");
    println!("cargo::rustc-check-cfg=cfg(wide)");
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let features = std::env::var("CARGO_CFG_TARGET_FEATURE").unwrap_or_default();
    let has = |f: &str| features.split(',').any(|x| x == f);
    if arch == "x86_64" && has("avx2") && has("fma") && has("f16c") {
        println!("cargo::rustc-cfg=vector");
        if ["avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512vnni"]
            .into_iter()
            .all(has)
        {
            println!("cargo::rustc-cfg=wide");
        }
    }
}
