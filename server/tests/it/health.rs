use crate::on_both_backends;
use server::testkit::spawn_app;

on_both_backends! {
    async fn health_and_readiness_answer_200_when_the_database_is_up(db) {
        let app = spawn_app(&db).await;
        let client = reqwest::Client::new();
        let health = client.get(app.url("/healthz")).send().await.unwrap();
        assert_eq!(health.status(), 200);
        let ready = client.get(app.url("/readyz")).send().await.unwrap();
        assert_eq!(ready.status(), 200);
        assert_eq!(ready.json::<serde_json::Value>().await.unwrap()["status"], "ready");
        app.stop().await;
    }
}

on_both_backends! {
    async fn an_unknown_api_path_is_a_json_404(db) {
        let app = spawn_app(&db).await;
        let resp = reqwest::get(app.url("/v1/nothing/here")).await.unwrap();
        assert_eq!(resp.status(), 404);
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(body["code"], "not_found");
        assert!(body["message"].is_string());
        app.stop().await;
    }
}

on_both_backends! {
    async fn readiness_fails_when_the_database_is_gone(db) {
        let app = spawn_app(&db).await;
        // Close the storage's pool under the running server.
        db.storage.raw_pool().close().await;
        let ready = reqwest::get(app.url("/readyz")).await.unwrap();
        assert_eq!(ready.status(), 503);
        assert_eq!(ready.json::<serde_json::Value>().await.unwrap()["status"], "unavailable");
    }
}
