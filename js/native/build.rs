//! Links the addon as Node expects (Node-API symbols resolved when Node loads it).

fn main() {
    napi_build::setup();
}
