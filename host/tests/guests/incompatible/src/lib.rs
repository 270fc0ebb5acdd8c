//! Exports `trainforge:plugin/guest@9.0.0`, which this host does not serve.

wit_bindgen::generate!({
    inline: "
        package trainforge:plugin@9.0.0;
        interface guest {
            describe: func() -> string;
        }
        world plugin {
            export guest;
        }
    ",
});

struct Future;

impl exports::trainforge::plugin::guest::Guest for Future {
    fn describe() -> String {
        "from the future".into()
    }
}

export!(Future);
