//! Property: any text maps through tokenize and embed to the values the fixtures
//! compute (ids = code points, values = [len / 10, 1.0]).

use proptest::prelude::*;
use serde_json::json;
use workflow::testkit::{FixtureServer, two_step_workflow};
use workflow::{CompiledWorkflow, Runner};

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn text_maps_through_tokenize_and_embed(text in "\\PC{0,80}") {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let server = FixtureServer::start().await;
            let wf = CompiledWorkflow::compile(&two_step_workflow(&server.target())).unwrap();
            let input = wf.parse_input(&json!({ "text": text })).unwrap();
            let outcome = Runner::new().run(&wf, &input).await.expect("runs");
            let chars = text.chars().count();
            let expected_ids: Vec<i64> = text.chars().map(|c| i64::from(u32::from(c))).collect();
            prop_assert_eq!(
                outcome.steps[0].response.clone().unwrap_or_default().get("ids").cloned().unwrap_or(json!([])),
                json!(expected_ids)
            );
            let output = outcome.output_json();
            prop_assert_eq!(output.get("sourceText").cloned().unwrap_or(json!("")), json!(text));
            prop_assert_eq!(output["vector"].clone(), json!([chars as f64 / 10.0, 1.0]));
            Ok(())
        })?;
    }
}
