// ISA-L's igzip from the isal-sys crate's vendored source, its portable C
// kernels only (the `arch=noarch` file list of igzip/Makefile.am and
// crc/Makefile.am, `-Dbase_aliases`), compiled by the cc crate: no nasm.
fn main() {
    let isal = std::env::var("ISAL_SRC").expect("ISAL_SRC");
    let mut b = cc::Build::new();
    for f in [
        "igzip/igzip.c",
        "igzip/huff_codes.c",
        "igzip/hufftables_c.c",
        "igzip/igzip_base.c",
        "igzip/igzip_icf_base.c",
        "igzip/adler32_base.c",
        "igzip/flatten_ll.c",
        "igzip/encode_df.c",
        "igzip/igzip_icf_body.c",
        "igzip/igzip_inflate.c",
        "igzip/igzip_base_aliases.c",
        "igzip/proc_heap_base.c",
        "crc/crc_base.c",
        "crc/crc64_base.c",
        "crc/crc_base_aliases.c",
    ] {
        b.file(format!("{isal}/{f}"));
    }
    b.file("src/wrap.c")
        .include(format!("{isal}/include"))
        .include(format!("{isal}/igzip"))
        .define("base_aliases", None)
        .opt_level(2)
        .warnings(false)
        .compile("isalc");
    println!("cargo:rerun-if-changed=src/wrap.c");
}
