//! Browser entry point: `wasm-bindgen` exports `hydrate`, which the server-rendered page calls
//! once the wasm has loaded, attaching Leptos' reactive handlers to the existing DOM.

use wasm_bindgen::prelude::wasm_bindgen;

#[wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_body(spade_app::App);
}
