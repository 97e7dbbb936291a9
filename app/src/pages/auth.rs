//! Log-in and registration: plain HTML forms that POST, so they work without JavaScript and
//! password managers recognise them. A failed attempt comes back with the message and the
//! email kept (never the password).

use leptos::prelude::*;

/// The message with its first letter capitalised (API messages start in lower case).
pub(crate) fn sentence(msg: String) -> String {
    let mut c = msg.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => msg,
    }
}

/// Where the forms post; the backend owns these routes.
pub const LOGIN_ACTION: &str = "/login";
pub const REGISTER_ACTION: &str = "/register";

/// The log-in page.
#[component]
pub fn LoginView(
    /// Message of the previous failed attempt.
    error: Option<String>,
    /// Email of the previous attempt.
    email: String,
    /// Where to go after logging in (a local path).
    next: String,
) -> impl IntoView {
    view! {
        <div class="auth-card card">
            <h1>"Log in"</h1>
            {error.map(|e| view! { <p class="form-error" role="alert" id="login-error">{sentence(e)}</p> })}
            <form method="post" action=LOGIN_ACTION class="stack">
                <input type="hidden" name="next" value=next />
                <div class="field">
                    <label for="login-email">"Email"</label>
                    <input id="login-email" name="email" type="email" autocomplete="username" required value=email />
                </div>
                <div class="field">
                    <label for="login-password">"Password"</label>
                    <input id="login-password" name="password" type="password" autocomplete="current-password" required />
                </div>
                <button type="submit">"Log in"</button>
            </form>
            <p class="sub">"No account yet? " <a href="/register">"Register"</a></p>
        </div>
    }
}

/// The registration page.
#[component]
pub fn RegisterView(error: Option<String>, email: String, display_name: String) -> impl IntoView {
    view! {
        <div class="auth-card card">
            <h1>"Create an account"</h1>
            {error.map(|e| view! { <p class="form-error" role="alert" id="register-error">{sentence(e)}</p> })}
            <form method="post" action=REGISTER_ACTION class="stack">
                <div class="field">
                    <label for="reg-name">"Display name"</label>
                    <input id="reg-name" name="display_name" autocomplete="name" required maxlength="100" value=display_name />
                </div>
                <div class="field">
                    <label for="reg-email">"Email"</label>
                    <input id="reg-email" name="email" type="email" autocomplete="username" required value=email />
                </div>
                <div class="field">
                    <label for="reg-password">"Password"</label>
                    <input id="reg-password" name="password" type="password" autocomplete="new-password" required minlength="8" aria-describedby="reg-password-help" />
                    <p class="help" id="reg-password-help">"At least 8 characters."</p>
                </div>
                <button type="submit">"Register"</button>
            </form>
            <p class="sub">"Already registered? " <a href="/login">"Log in"</a></p>
        </div>
    }
}
