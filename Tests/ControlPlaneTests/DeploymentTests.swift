import Foundation
import Testing
import TestSupport

/// The container image and Kubernetes manifests (Fixtures/deploy), checked offline: the manifests
/// against Kubernetes' schemas (kubernetes-validate, strict), and against the node itself: every
/// flag they pass exists, the metric the autoscaler reads is exported, and the preStop hook really
/// puts a running node in SOFT_SUNSET.
@Suite struct DeploymentTests {
    static let deploy = fixturesDirectory.appendingPathComponent("deploy")
    static let manifests = ["abr-worker.yaml", "secret.example.yaml", "prometheus-adapter-rules.yaml", "prometheus-scrape-config.yaml"]
        .map { deploy.appendingPathComponent("kubernetes/\($0)").path }
    /// Installed by `./abr test` (and `./abr deps`) into the build folder.
    static let validator = fixturesDirectory.deletingLastPathComponent().appendingPathComponent(".build/python/bin/kubernetes-validate").path
    static let python = fixturesDirectory.deletingLastPathComponent().appendingPathComponent(".build/python/bin/python").path

    /// The Deployment's container as JSON, read with PyYAML (kubernetes-validate's own dependency).
    static func deployment() throws -> [String: Any] {
        let script = """
            import json, sys, yaml
            docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "Deployment"]
            print(json.dumps(docs[0]))
            """
        let result = try runProcess(python, ["-c", script, manifests[0]])
        #expect(result.status == 0, "\(result.stderr)")
        return try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
    }

    @Test func manifestsPassKubernetesSchemasStrictly() throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.validator), "run ./abr deps (or ./abr test) to install kubernetes-validate")
        let result = try runProcess(Self.validator, ["--strict"] + Self.manifests, timeout: 120)
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        for kind in ["deployment/abr-worker", "service/abr-worker-http", "poddisruptionbudget/abr-worker", "horizontalpodautoscaler/abr-worker",
                     "secret/abr-worker", "configmap/abr-worker-adapter-rules", "configmap/abr-worker-prometheus"] {
            #expect(result.stdout.contains("passed for resource \(kind)") || result.stderr.contains("passed for resource \(kind)"), "\(kind)")
        }
    }

    @Test func theDeploymentMatchesTheNodeItRuns() throws {
        let deployment = try Self.deployment()
        let pod = try #require((deployment["spec"] as? [String: Any])?["template"] as? [String: Any])
        let spec = try #require(pod["spec"] as? [String: Any])
        let container = try #require((spec["containers"] as? [[String: Any]])?.first)
        let args = container["args"] as? [String] ?? []

        // Every flag exists in `serve`, as this build parses it.
        let help = try runProcess(workerExecutable, ["serve", "--help"])
        for flag in args.compactMap({ $0.split(separator: "=").first.map(String.init) }) {
            #expect(help.stdout.contains(flag + " "), "serve has no \(flag)")
        }
        // The kubelet waits for the drain.
        let drain = try #require(args.first { $0.hasPrefix("--drain-timeout=") }.flatMap { Double($0.split(separator: "=")[1]) })
        let grace = try #require(spec["terminationGracePeriodSeconds"] as? Double)
        #expect(grace >= drain + 10, "terminationGracePeriodSeconds \(grace) must cover --drain-timeout \(drain) and the exit")
        let readiness = (container["readinessProbe"] as? [String: Any])?["httpGet"] as? [String: Any]
        #expect(readiness?["path"] as? String == "/ready")
        let env = container["env"] as? [[String: Any]] ?? []
        let store = env.first { $0["name"] as? String == "ABR_WORKER_STORE" }
        #expect(((store?["valueFrom"] as? [String: Any])?["secretKeyRef"] as? [String: Any])?["name"] as? String == "abr-worker",
                "the PostgreSQL URL comes from the Secret")

        // The preStop hook, run for real against a node: it ends in SOFT_SUNSET and leaves the Service.
        let command = try #require(((container["lifecycle"] as? [String: Any])?["preStop"] as? [String: Any])
            .flatMap { ($0["exec"] as? [String: Any])?["command"] as? [String] })
        let scratch = ServeTests.scratch()
        defer { try? FileManager.default.removeItem(at: scratch) }
        let node = try ServeProcess(dataDirectory: scratch, environment: ServeTests.credentials)
        defer { node.stop() }
        let metrics = try node.http("GET", "/metrics").body
        #expect(metrics.contains("abr_worker_encode_load_ratio "), "the HPA's metric is exported")
        #expect(metrics.contains(#"abr_worker_node_state{state="INSERVICE"} 1"#))
        let port = try #require(node.httpBase.split(separator: ":").last)
        let script = command.last!.replacingOccurrences(of: "127.0.0.1:5080", with: "127.0.0.1:\(port)")
        // The pod's environment gives the hook the admin login from the Secret.
        let login = ["ABR_WORKER_ADMIN_USER", "ABR_WORKER_ADMIN_PASSWORD"].map { "\($0)=\(ServeTests.credentials[$0]!)" }
        let hook = try runProcess("/usr/bin/env", login + ["/bin/sh", "-c", script], timeout: 30)
        #expect(hook.status == 0, "\(hook.stderr)")
        #expect(try node.http("GET", "/ready").status == 503)
        #expect(try node.http("GET", "/metrics").body.contains(#"abr_worker_node_state{state="SOFT_SUNSET"} 1"#))
    }

    @Test func theImageIsBuiltInTwoDebian12StagesFromTheSamePackageLists() throws {
        let dockerfile = try String(contentsOf: Self.deploy.appendingPathComponent("Dockerfile"), encoding: .utf8)
        let stages = dockerfile.split(separator: "\n").filter { $0.hasPrefix("FROM ") }
        #expect(stages.count == 2)
        #expect(dockerfile.contains("ARG SWIFT_IMAGE=swift:") && dockerfile.contains("-bookworm"), "the build stage is Debian 12")
        #expect(stages.last?.contains("debian:12") == true, "the runtime stage is Debian 12")
        #expect(dockerfile.contains("./abr deps build") && dockerfile.contains("abr deps runtime"), "the packages come from ./abr")
        // The runtime list names real Debian 12 packages that provide what the node links.
        let abr = try String(contentsOf: fixturesDirectory.deletingLastPathComponent().appendingPathComponent("abr"), encoding: .utf8)
        let runtime = try #require(abr.firstMatch(of: /runtime_packages=\(([^)]*)\)/)).output.1.split(separator: " ").map(String.init)
        let linked = try runProcess("/usr/bin/ldd", [workerExecutable]).stdout
        for library in ["libavcodec.so.59", "libavformat.so.59", "libswscale.so.6", "libswresample.so.4", "libavutil.so.57", "libsqlite3.so.0", "libsrt-gnutls.so.1.5"] {
            #expect(linked.contains(library), "the node links \(library)")
            let owner = try runProcess("/usr/bin/dpkg", ["-S", library]).stdout
            #expect(runtime.contains { owner.contains("\($0):") }, "\(library) (\(owner.prefix(60))) comes from a runtime package")
        }
    }

    /// The Grafana dashboard asks only for series a live node exports, and Prometheus's scrape job
    /// finds the Deployment's pods on a port the container has.
    @Test func theDashboardQueriesOnlyWhatTheNodeExports() throws {
        let dashboard = try String(contentsOfFile: Self.deploy.appendingPathComponent("grafana/abr-worker-dashboard.json").path, encoding: .utf8)
        let parsed = try #require(try JSONSerialization.jsonObject(with: Data(dashboard.utf8)) as? [String: Any])
        var expressions: [String] = []
        func collect(_ value: Any) {
            if let object = value as? [String: Any] {
                for (key, field) in object {
                    if ["expr", "definition"].contains(key), let text = field as? String { expressions.append(text) } else { collect(field) }
                }
            } else if let array = value as? [Any] {
                array.forEach(collect)
            }
        }
        collect(parsed)
        let asked = Set(expressions.flatMap { $0.matches(of: /abr_worker_[a-z0-9_]+/).map { String($0.output) } })
        #expect(asked.count >= 20, "\(asked.sorted())")
        for topic in ["abr_worker_variant_bitrate_bps", "abr_worker_players", "abr_worker_player_switches_total",
                      "abr_worker_publishers_by_protocol", "abr_worker_fleet_nodes"] {
            #expect(asked.contains(topic), "the dashboard leaves out \(topic)")
        }

        let scratch = ServeTests.scratch()
        defer { try? FileManager.default.removeItem(at: scratch) }
        let node = try ServeProcess(dataDirectory: scratch, arguments: ["--provision", fixture("provisions/sm2-3-level.json")],
                                    environment: ServeTests.credentials)
        defer { node.stop() }
        var exported: Set<String> = []
        _ = try node.waitFor(timeout: 10) {
            let metrics = try node.http("GET", "/metrics").body
            exported = Set(metrics.split(separator: "\n").filter { $0.hasPrefix("# TYPE abr_worker_") }.compactMap { $0.split(separator: " ").dropFirst(2).first.map(String.init) })
            return exported.contains("abr_worker_fleet_nodes")
        }
        let missing = asked.subtracting(exported)
        #expect(missing.isEmpty, "the dashboard asks for series the node does not export: \(missing.sorted())")

        let script = """
            import json, sys, yaml
            config = yaml.safe_load(yaml.safe_load(open(sys.argv[1]))["data"]["prometheus.yml"])
            print(json.dumps(config))
            """
        let scrape = try runProcess(Self.python, ["-c", script, Self.deploy.appendingPathComponent("kubernetes/prometheus-scrape-config.yaml").path])
        let job = try #require(((try JSONSerialization.jsonObject(with: Data(scrape.stdout.utf8)) as? [String: Any])?["scrape_configs"] as? [[String: Any]])?.first,
                               "\(scrape.stderr)")
        #expect(job["metrics_path"] as? String == "/metrics")
        let relabel = job["relabel_configs"] as? [[String: Any]] ?? []
        let portName = relabel.first { ($0["source_labels"] as? [String]) == ["__meta_kubernetes_pod_container_port_name"] }?["regex"] as? String
        let container = try #require(((((try Self.deployment()["spec"] as? [String: Any])?["template"] as? [String: Any])?["spec"] as? [String: Any])?["containers"] as? [[String: Any]])?.first)
        let ports = (container["ports"] as? [[String: Any]] ?? []).compactMap { $0["name"] as? String }
        #expect(portName != nil && ports.contains(portName!), "the scrape job keeps port \(portName ?? "none"); the container has \(ports)")
        #expect(try node.http("GET", "/metrics").body.contains("abr_worker_player_switches_total{direction=\"up\"} 0"))
    }
}
