//! `vibe-shim-probe`: the probe as a static binary to bind into any
//! container (`docker run -v ...:/vibe-shim-probe:ro IMAGE /vibe-shim-probe`).

use clap::{CommandFactory, FromArgMatches};

fn main() {
    let matches = vibe_probe::Args::command()
        .bin_name("vibe-shim-probe")
        .get_matches();
    let args = match vibe_probe::Args::from_arg_matches(&matches) {
        Ok(args) => args,
        Err(e) => e.exit(),
    };
    std::process::exit(vibe_probe::run(&args));
}
