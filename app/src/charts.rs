//! Line charts for training curves (reward, regret, learnable share, Vendi, win rates, ...),
//! drawn by `plotters` into SVG strings so the same code renders on the server and in the
//! browser. `line` draws; `smooth` holds the EMA; the [`LineChart`] component shows one chart
//! with its accessible title, and [`ChartControls`] is the GET form (smoothing, x axis, log
//! scale) that works without JavaScript and updates every chart live once hydrated.

pub mod line;
pub mod smooth;

pub use line::{ChartError, non_positive_points, render_line_chart};

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

/// One point of a curve: the training step, seconds since the run started, and the value.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Point {
    pub step: f64,
    pub time_s: f64,
    pub value: f64,
}

/// A named curve, optionally with a shaded band around it (the spread of several runs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Series {
    pub name: String,
    pub points: Vec<Point>,
    /// Lower and upper edge per point of `points` (same length, or empty for no band).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub band: Vec<(f64, f64)>,
}

impl Series {
    /// A curve without a band.
    pub fn line(name: impl Into<String>, points: Vec<Point>) -> Self {
        Self {
            name: name.into(),
            points,
            band: Vec::new(),
        }
    }
}

/// What the x axis shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum XAxis {
    #[default]
    Step,
    /// Wall-clock time since the run started.
    Time,
}

impl XAxis {
    /// Parses the `x` query parameter; anything but `time` means steps.
    pub fn from_query(s: &str) -> Self {
        if s == "time" {
            XAxis::Time
        } else {
            XAxis::Step
        }
    }

    pub fn as_query(self) -> &'static str {
        match self {
            XAxis::Step => "step",
            XAxis::Time => "time",
        }
    }
}

/// How to draw a chart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChartOptions {
    pub title: String,
    pub y_label: String,
    pub x_axis: XAxis,
    pub log_y: bool,
    /// EMA weight in [0, 1).
    pub smoothing: f64,
    /// Added to every step on the step axis: 1 for metrics, whose step 0 is the first step a
    /// run completed (progress and the log count it as step 1); 0 for checkpoint steps.
    pub step_offset: f64,
    pub width: u32,
    pub height: u32,
    /// Draw the legend inside the SVG (a standalone chart). The pages draw it as HTML above
    /// the chart instead: the browser wraps real text widths there, where the SVG could only
    /// guess them and long run names ran into each other.
    pub svg_legend: bool,
}

impl ChartOptions {
    pub fn new(title: impl Into<String>, y_label: impl Into<String>) -> Self {
        Self {
            title: title.into(),
            y_label: y_label.into(),
            x_axis: XAxis::Step,
            log_y: false,
            smoothing: 0.0,
            step_offset: 0.0,
            width: 640,
            height: 320,
            svg_legend: true,
        }
    }
}

/// Chart settings shared by every chart of a page; initialised from the query string.
#[derive(Debug, Clone, Copy)]
pub struct ChartSettings {
    pub smoothing: RwSignal<f64>,
    pub x_axis: RwSignal<XAxis>,
    pub log_y: RwSignal<bool>,
    /// Text the chart titles must contain to be shown (the "Find a chart" box; a page can
    /// hold 60 charts). Empty: all.
    pub find: RwSignal<String>,
}

impl ChartSettings {
    /// From the query parameters `smooth` (0..0.99), `x` (`step`|`time`) and `log` (`1`).
    /// Out-of-range smoothing is clamped rather than refused: it comes from a slider.
    pub fn from_query(smooth: Option<&str>, x: Option<&str>, log: Option<&str>) -> Self {
        let smoothing = smooth
            .and_then(|s| s.parse::<f64>().ok())
            .filter(|v| v.is_finite())
            .map_or(0.0, |v| v.clamp(0.0, MAX_SMOOTHING));
        Self {
            smoothing: RwSignal::new(smoothing),
            x_axis: RwSignal::new(XAxis::from_query(x.unwrap_or("step"))),
            log_y: RwSignal::new(matches!(log, Some("1" | "true" | "on"))),
            find: RwSignal::new(String::new()),
        }
    }
}

impl ChartSettings {
    /// With the chart filter from the query parameter `find` (a saved view's, say).
    pub fn with_find(self, find: Option<String>) -> Self {
        if let Some(f) = find {
            self.find.set(f.chars().take(100).collect());
        }
        self
    }
}

/// The viewer's saved chart views beside the controls: links that open this page with a view's
/// settings, and a form that saves the current settings under a name.
#[derive(Debug, Clone, PartialEq)]
pub struct SavedViews {
    /// (name, the page with that view's settings).
    pub links: Vec<(String, String)>,
    pub csrf: String,
    /// The page to come back to after saving (its path and the parameters it needs).
    pub back: String,
}

/// The largest smoothing weight the slider offers; 1.0 would freeze the curve at its start.
pub const MAX_SMOOTHING: f64 = 0.99;

/// The controls for every chart on the page: a GET form (so it works without JavaScript; the
/// server renders the charts with the submitted settings) whose inputs also update the charts
/// immediately once the page is hydrated.
#[component]
pub fn ChartControls(
    settings: ChartSettings,
    /// Query parameters the page needs besides the settings (the compare page's `run`s), sent
    /// along as hidden inputs: a GET form replaces the whole query.
    #[prop(default = Vec::new())]
    keep: Vec<(String, String)>,
    /// The viewer's saved views (pages of a signed-in person; not the shared page).
    #[prop(default = None)]
    saved: Option<SavedViews>,
) -> impl IntoView {
    let ChartSettings {
        smoothing,
        x_axis,
        log_y,
        find,
    } = settings;
    let saved = saved.map(|s| saved_views(s, settings));
    let hidden = keep
        .into_iter()
        .map(|(name, value)| view! { <input type="hidden" name=name value=value /> })
        .collect_view();
    // Once hydrated, every change goes into the address bar too, so the URL is a permalink of
    // what the charts show (effects do not run on the server).
    Effect::new(move |_| write_to_url(smoothing.get(), x_axis.get(), log_y.get(), find.get()));
    view! {
        <form class="chart-controls" method="get" aria-label="Chart settings">
            {hidden}
            <label for="chart-smooth">"Smoothing"</label>
            <input
                id="chart-smooth"
                name="smooth"
                type="range"
                min="0"
                max=MAX_SMOOTHING.to_string()
                step="0.01"
                value=smoothing.get_untracked().to_string()
                prop:value=move || smoothing.get().to_string()
                on:input=move |ev| {
                    if let Ok(v) = event_target_value(&ev).parse::<f64>() {
                        smoothing.set(v.clamp(0.0, MAX_SMOOTHING));
                    }
                }
            />
            <output for="chart-smooth">{move || format!("{:.2}", smoothing.get())}</output>
            <label for="chart-x">"X axis"</label>
            <select
                id="chart-x"
                name="x"
                on:change=move |ev| x_axis.set(XAxis::from_query(&event_target_value(&ev)))
            >
                <option value="step" selected=move || x_axis.get() == XAxis::Step>"Step"</option>
                <option value="time" selected=move || x_axis.get() == XAxis::Time>"Time"</option>
            </select>
            <label class="check">
                <input
                    type="checkbox"
                    name="log"
                    value="1"
                    checked=log_y.get_untracked()
                    prop:checked=move || log_y.get()
                    on:change=move |ev| log_y.set(event_target_checked(&ev))
                />
                "Log scale"
            </label>
            <button type="submit" class="secondary">"Apply"</button>
            <label for="chart-find">"Find a chart"</label>
            <input
                id="chart-find"
                name="find"
                type="search"
                placeholder="title contains…"
                value=find.get_untracked()
                prop:value=move || find.get()
                on:input=move |ev| find.set(event_target_value(&ev))
            />
        </form>
        {saved}
    }
}

/// The saved views' links and the "save as" form; its hidden fields follow the settings as
/// they change, so it saves what the charts show.
fn saved_views(s: SavedViews, settings: ChartSettings) -> impl IntoView {
    let ChartSettings {
        smoothing,
        x_axis,
        log_y,
        find,
    } = settings;
    let links = if s.links.is_empty() {
        view! { <span class="sub">"none saved yet"</span> }.into_any()
    } else {
        s.links
            .into_iter()
            .map(|(name, href)| view! { <a class="view-link" href=href>{name}</a> " " })
            .collect_view()
            .into_any()
    };
    let x = move || match x_axis.get() {
        XAxis::Step => "step",
        XAxis::Time => "time",
    };
    view! {
        <div class="chart-views" id="chart-views">
            <span class="views-label">"Saved views:"</span>
            {links}
            <form method="post" action="/chart-views/save" class="inline-form" aria-label="Save these chart settings as a view">
                <input type="hidden" name="csrf" value=s.csrf />
                <input type="hidden" name="back" value=s.back />
                <input type="hidden" name="smoothing" value=smoothing.get_untracked().to_string() prop:value=move || smoothing.get().to_string() />
                <input type="hidden" name="x_axis" value=x prop:value=x />
                <input type="hidden" name="log_y" value=move || if log_y.get() { "1" } else { "" } prop:value=move || if log_y.get() { "1" } else { "" } />
                <input type="hidden" name="find" value=find.get_untracked() prop:value=move || find.get() />
                <label for="view-name" class="visually-hidden">"View name"</label>
                <input id="view-name" name="name" type="text" maxlength="60" required placeholder="Save these settings as…" />
                <button type="submit" class="secondary">"Save view"</button>
            </form>
        </div>
    }
}

/// Whether a chart titled `title` shows for the search `find` (case-insensitive; empty: yes).
pub fn chart_matches(title: &str, find: &str) -> bool {
    let find = find.trim();
    find.is_empty() || title.to_lowercase().contains(&find.to_lowercase())
}

/// What the crosshair reads at `x` (SVG units) from a chart's hover points (cx, title as
/// `render_line_chart` writes it: "name: value at step N"): the nearest x that has points, the
/// heading ("step N") and one "name: value" line per series there. `None` without points.
pub fn readout_at(points: &[(f64, String)], x: f64) -> Option<(f64, String, Vec<String>)> {
    let best = points
        .iter()
        .map(|(cx, _)| *cx)
        .min_by(|a, b| (a - x).abs().total_cmp(&(b - x).abs()))?;
    let mut heading = String::new();
    let lines = points
        .iter()
        .filter(|(cx, _)| (cx - best).abs() < 0.5)
        .map(|(_, t)| match t.rsplit_once(" at ") {
            Some((line, at)) => {
                heading = at.to_owned();
                line.to_owned()
            }
            None => t.clone(),
        })
        .collect();
    Some((best, heading, lines))
}

/// The readout under the pointer: where (percent of the chart's width) and what it says.
#[derive(Debug, Clone, PartialEq)]
struct Readout {
    left_pct: f64,
    heading: String,
    lines: Vec<String>,
}

/// Reads the hover points of the chart under the pointer and places the crosshair (hydrate
/// only; without a script each point keeps its native tooltip).
fn track_pointer(ev: leptos::ev::MouseEvent, readout: RwSignal<Option<Readout>>) {
    #[cfg(feature = "hydrate")]
    {
        use wasm_bindgen::JsCast;
        let Some(box_el) = ev
            .current_target()
            .and_then(|t| t.dyn_into::<web_sys::Element>().ok())
        else {
            return;
        };
        let Some(svg) = box_el.query_selector("svg").ok().flatten() else {
            return;
        };
        let rect = svg.get_bounding_client_rect();
        let width: f64 = svg
            .get_attribute("width")
            .and_then(|w| w.parse().ok())
            .unwrap_or(640.0);
        if rect.width() <= 0.0 {
            return;
        }
        let x = (f64::from(ev.client_x()) - rect.left()) * width / rect.width();
        let Ok(circles) = svg.query_selector_all(".chart-hover circle") else {
            return;
        };
        let mut points = Vec::with_capacity(circles.length() as usize);
        for i in 0..circles.length() {
            let Some(c) = circles
                .item(i)
                .and_then(|n| n.dyn_into::<web_sys::Element>().ok())
            else {
                continue;
            };
            let cx = c.get_attribute("cx").and_then(|v| v.parse::<f64>().ok());
            if let Some(cx) = cx {
                points.push((cx, c.text_content().unwrap_or_default()));
            }
        }
        readout.set(readout_at(&points, x).map(|(cx, heading, lines)| Readout {
            left_pct: 100.0 * cx / width,
            heading,
            lines,
        }));
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = (ev, readout);
}

/// Replaces the current history entry's `smooth`, `x`, `log` and `find` with these settings, keeping
/// its other parameters (the compare page's runs, filters); defaults are left out.
fn write_to_url(smoothing: f64, x_axis: XAxis, log_y: bool, find: String) {
    #[cfg(feature = "hydrate")]
    {
        let Some(w) = web_sys::window() else { return };
        let Ok(href) = w.location().href() else {
            return;
        };
        let Ok(url) = web_sys::Url::new(&href) else {
            return;
        };
        let q = url.search_params();
        if smoothing > 0.0 {
            q.set("smooth", &format!("{smoothing:.2}"));
        } else {
            q.delete("smooth");
        }
        match x_axis {
            XAxis::Step => q.delete("x"),
            XAxis::Time => q.set("x", "time"),
        }
        if log_y {
            q.set("log", "1");
        } else {
            q.delete("log");
        }
        if find.trim().is_empty() {
            q.delete("find");
        } else {
            q.set("find", find.trim());
        }
        url.set_search(&String::from(q.to_string()));
        let next = url.href();
        if next != href
            && let Ok(h) = w.history()
        {
            let _ = h.replace_state_with_url(&wasm_bindgen::JsValue::NULL, "", Some(&next));
        }
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = (smoothing, x_axis, log_y, find);
}

/// One chart: an accessible heading, the SVG (re-rendered when the page's [`ChartSettings`]
/// change) or the reason it cannot be drawn (say, log scale over values that are not positive).
#[component]
pub fn LineChart(
    #[prop(into)] title: String,
    #[prop(into)] y_label: String,
    /// The curves; a signal so a live page can extend them.
    #[prop(into)]
    series: Signal<Vec<Series>>,
    settings: ChartSettings,
    /// See [`ChartOptions::step_offset`]: the default suits metrics.
    #[prop(default = 1.0)]
    step_offset: f64,
) -> impl IntoView {
    let heading = title.clone();
    let shown = {
        let title = title.clone();
        move || chart_matches(&title, &settings.find.get())
    };
    let readout = RwSignal::new(None::<Readout>);
    let svg = Memo::new(move |_| {
        let opts = ChartOptions {
            x_axis: settings.x_axis.get(),
            log_y: settings.log_y.get(),
            smoothing: settings.smoothing.get(),
            step_offset,
            svg_legend: false,
            ..ChartOptions::new(title.clone(), y_label.clone())
        };
        series
            .with(|s| render_line_chart(s, &opts))
            .map_err(|e| e.to_string())
    });
    // What the log scale leaves out is said, not silently dropped.
    let left_out = Memo::new(move |_| {
        if settings.log_y.get() {
            series.with(|s| non_positive_points(s))
        } else {
            0
        }
    });
    view! {
        <section class="chart card" class:filtered-out=move || !shown()>
            <h3>{heading}</h3>
            {move || (left_out.get() > 0).then(|| {
                let n = left_out.get();
                view! {
                    <p class="chart-note" role="note">
                        {format!(
                            "{n} point{} at or below 0 not shown: a log scale has no place for them.",
                            if n == 1 { "" } else { "s" }
                        )}
                    </p>
                }
            })}
            {move || {
                let names: Vec<String> = series.with(|s| s.iter().map(|s| s.name.clone()).collect());
                (!names.is_empty()).then(|| view! {
                    <ul class="chart-legend" aria-label="Series">
                        {names.into_iter().enumerate().map(|(i, n)| view! {
                            <li><span class=format!("swatch s{}", i % line::PALETTE.len()) aria-hidden="true"></span>{n}</li>
                        }).collect_view()}
                    </ul>
                })
            }}
            {move || match svg.get() {
                Ok(svg) => view! {
                    <div
                        class="chart-svg"
                        on:mousemove=move |ev| track_pointer(ev, readout)
                        on:mouseleave=move |_| readout.set(None)
                    >
                        <div inner_html=svg></div>
                        {move || readout.get().map(|r| {
                            let left = format!("{:.2}%", r.left_pct);
                            // Keep the box on the chart: right of the line in its left half.
                            let side = if r.left_pct < 50.0 { "readout-right" } else { "readout-left" };
                            view! {
                                <div class="chart-crosshair" style:left=left.clone() aria-hidden="true"></div>
                                <div class=format!("chart-readout {side}") style:left=left role="status">
                                    <strong>{r.heading}</strong>
                                    {r.lines.into_iter().map(|l| view! { <div>{l}</div> }).collect_view()}
                                </div>
                            }
                        })}
                    </div>
                }.into_any(),
                Err(msg) => view! { <p class="chart-error" role="status">{msg}</p> }.into_any(),
            }}
        </section>
    }
}

#[cfg(test)]
mod readout_tests {
    use super::*;

    #[test]
    fn the_readout_takes_every_series_at_the_nearest_step() {
        let pts = vec![
            (100.0, "regret: 0.1 at step 1".to_owned()),
            (200.0, "regret: 0.3 at step 2".to_owned()),
            (100.0, "learnable share: 0.5 at step 1".to_owned()),
            (200.2, "learnable share: 0.4 at step 2".to_owned()),
        ];
        let (cx, heading, lines) = readout_at(&pts, 180.0).expect("points");
        assert_eq!(cx, 200.0);
        assert_eq!(heading, "step 2");
        assert_eq!(lines, ["regret: 0.3", "learnable share: 0.4"]);
        let (_, heading, lines) = readout_at(&pts, -5.0).expect("points");
        assert_eq!((heading.as_str(), lines.len()), ("step 1", 2));
        assert_eq!(readout_at(&[], 3.0), None);
    }

    #[test]
    fn chart_search_ignores_case_and_blank_text() {
        assert!(chart_matches("Win rate per skill", "WIN"));
        assert!(chart_matches("Win rate per skill", "  "));
        assert!(!chart_matches("Win rate per skill", "regret"));
    }
}
