/**
 * Issue 14: deploy/kubernetes renders (kubectl kustomize, no cluster needed), every object is valid
 * against the Kubernetes and KEDA schemas (kubernetes-models), every container's settings parse with
 * the programs' own config loaders, and every KEDA ScaledObject watches exactly the Redis list where
 * BullMQ keeps its model's waiting jobs.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { QueueKeys } from 'bullmq';
import { parseAllDocuments } from 'yaml';
import { loadGatewayConfig, loadWorkerConfig } from '@tserve/config';
import { queueNameFor } from '@tserve/queue';
import { ConfigMap, Namespace, PersistentVolumeClaim, Service } from 'kubernetes-models/v1';
import { Deployment, StatefulSet } from 'kubernetes-models/apps/v1';
import { HorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1';
import { ScaledObject } from '@kubernetes-models/keda/keda.sh/v1alpha1';
import { ROOT, uniquePrefix } from './helpers/system.ts';

type K8sObject = { apiVersion: string; kind: string; metadata: { name: string; namespace?: string }; spec?: any; data?: Record<string, string> };

const VALIDATORS: Record<string, (o: any) => { validate(): void }> = {
  'v1/ConfigMap': (o) => new ConfigMap(o),
  'v1/Namespace': (o) => new Namespace(o),
  'v1/PersistentVolumeClaim': (o) => new PersistentVolumeClaim(o),
  'v1/Service': (o) => new Service(o),
  'apps/v1/Deployment': (o) => new Deployment(o),
  'apps/v1/StatefulSet': (o) => new StatefulSet(o),
  'autoscaling/v2/HorizontalPodAutoscaler': (o) => new HorizontalPodAutoscaler(o),
  'policy/v1/PodDisruptionBudget': (o) => new PodDisruptionBudget(o),
  'keda.sh/v1alpha1/ScaledObject': (o) => new ScaledObject(o),
};

const OVERLAYS = ['cpu', 'gpu'];
const hasKubectl = !spawnSync('kubectl', ['version', '--client'], { encoding: 'utf8' }).error;

function render(overlay: string): K8sObject[] {
  const run = spawnSync('kubectl', ['kustomize', path.join(ROOT, 'deploy/kubernetes/overlays', overlay)], { encoding: 'utf8' });
  assert.equal(run.status, 0, `kubectl kustomize ${overlay}: ${run.stderr}`);
  return parseAllDocuments(run.stdout)
    .map((d) => d.toJS() as K8sObject)
    .filter(Boolean);
}

/** A container's environment as the process sees it: its ConfigMaps first, then its own env (literal values). */
function environment(container: any, objects: K8sObject[]): Record<string, string> {
  const env: Record<string, string> = {};
  for (const from of container.envFrom ?? []) {
    const map = from.configMapRef && objects.find((o) => o.kind === 'ConfigMap' && o.metadata.name === from.configMapRef.name);
    Object.assign(env, map?.data ?? {});
  }
  for (const e of container.env ?? []) env[e.name] = e.value ?? `(from ${Object.keys(e.valueFrom ?? {}).join(',')})`;
  return env;
}

/** A memory quantity in bytes ("512Mi", "1Gi", "128M"). */
function bytesOf(quantity: string): number {
  const match = /^(\d+)(Ki|Mi|Gi|k|M|G)?$/.exec(quantity);
  assert.ok(match, `memory quantity ${quantity}`);
  const unit = { Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, k: 1e3, M: 1e6, G: 1e9 }[match[2] ?? ''] ?? 1;
  return Number(match[1]) * unit;
}

/**
 * Every ScaledObject's Redis list against the key the workers of its target really use. Returns the
 * disagreements, each a sentence; empty when all agree.
 */
function scaledObjectMismatches(objects: K8sObject[], waitKey: (prefix: string, model: string) => string): string[] {
  const problems: string[] = [];
  for (const so of objects.filter((o) => o.kind === 'ScaledObject')) {
    const target = objects.find((o) => o.kind === 'Deployment' && o.metadata.name === so.spec.scaleTargetRef.name);
    if (!target) {
      problems.push(`${so.metadata.name}: no Deployment ${so.spec.scaleTargetRef.name}`);
      continue;
    }
    const env = environment(target.spec.template.spec.containers[0], objects);
    const expected = waitKey(env.QUEUE_PREFIX ?? 'tserve', env.MODEL);
    for (const trigger of so.spec.triggers) {
      if (trigger.type !== 'redis') continue;
      if (trigger.metadata.listName !== expected)
        problems.push(`${so.metadata.name}: listName ${trigger.metadata.listName}, but the workers of ${env.MODEL} use ${expected}`);
      const host = String(trigger.metadata.address).split(':')[0];
      const service = new URL(env.REDIS_URL).hostname;
      const ns = so.metadata.namespace ?? 'default';
      if (host !== `${service}.${ns}.svc.cluster.local`)
        problems.push(`${so.metadata.name}: KEDA reaches Redis at ${host}, the workers at ${service} in ${ns}`);
    }
  }
  return problems;
}

/** The wait list's key as BullMQ itself names it (its own key builder, not re-derived here). */
const bullmqWaitKey = (prefix: string, model: string) => new QueueKeys(prefix).getKeys(queueNameFor(model)).wait;

describe('Kubernetes manifests', { skip: hasKubectl ? false : 'kubectl is not installed (it renders the kustomizations)' }, () => {
  for (const overlay of OVERLAYS) {
    it(`overlays/${overlay} renders, and every object is valid against the Kubernetes and KEDA schemas`, () => {
      const objects = render(overlay);
      assert.ok(objects.length >= 10);
      for (const o of objects) {
        const validator = VALIDATORS[`${o.apiVersion}/${o.kind}`];
        assert.ok(validator, `no schema checked for ${o.apiVersion} ${o.kind}`);
        assert.doesNotThrow(() => validator(o).validate(), `${o.kind} ${o.metadata.name}`);
        if (o.kind !== 'Namespace') assert.equal(o.metadata.namespace, 'tserve', `${o.kind} ${o.metadata.name}`);
      }
    });

    it(`overlays/${overlay}: every container's settings parse, grace periods cover the drains, probes ask real routes`, () => {
      const objects = render(overlay);
      for (const d of objects.filter((o) => o.kind === 'Deployment')) {
        const pod = d.spec.template.spec;
        const container = pod.containers[0];
        const env = environment(container, objects);
        const script = container.command.join(' ');
        if (script.includes('gateway')) {
          const config = loadGatewayConfig(env);
          assert.ok(
            pod.terminationGracePeriodSeconds * 1000 > config.SHUTDOWN_GRACE_MS,
            `${d.metadata.name}: terminationGracePeriodSeconds ${pod.terminationGracePeriodSeconds} <= SHUTDOWN_GRACE_MS`,
          );
          for (const probe of ['readinessProbe', 'livenessProbe']) {
            assert.ok(['/ready', '/health'].includes(container[probe]?.httpGet?.path), `${d.metadata.name} ${probe}`);
          }
        } else {
          assert.match(script, /apps\/worker\/dist\/main\.js/);
          const config = loadWorkerConfig(env);
          assert.ok(config.MODEL);
          assert.ok(pod.terminationGracePeriodSeconds >= 30, `${d.metadata.name}: a worker needs time to finish its batch`);
          if (overlay === 'gpu') assert.equal(container.resources.limits['nvidia.com/gpu'], '1');
        }
      }
      const gateway = objects.find((o) => o.kind === 'Deployment' && o.metadata.name === 'tserve-gateway')!;
      assert.equal(gateway.spec.template.spec.containers[0].readinessProbe.httpGet.path, '/ready');
      assert.equal(gateway.spec.template.spec.containers[0].livenessProbe.httpGet.path, '/health');
      assert.ok(gateway.spec.template.spec.containers[0].startupProbe);
      const container = gateway.spec.template.spec.containers[0];
      // A gateway turning large answers held /health 1.9 s: not dead, and not to be restarted with every request it holds.
      assert.ok((container.livenessProbe.timeoutSeconds ?? 1) >= 5, 'gateway liveness timeoutSeconds under 5 s');
      // Its byte bounds fit its memory limit, with room for the process and the answers it builds (gateway.yaml says why 512 MiB).
      const config = loadGatewayConfig(environment(container, objects));
      const held = config.MAX_BODIES_BYTES + config.MAX_UNREAD_ANSWERS_BYTES;
      const limit = container.resources.limits.memory;
      assert.ok(bytesOf(limit) >= held + 512 * 2 ** 20, `gateway memory limit ${limit} under MAX_BODIES_BYTES + MAX_UNREAD_ANSWERS_BYTES (${held}) + 512 MiB`);
      const dashboard = objects.find((o) => o.kind === 'Service' && o.metadata.name === 'tserve-dashboard')!;
      assert.equal(dashboard.spec.type, 'ClusterIP', 'the dashboard stays internal');
    });

    it(`overlays/${overlay}: every ScaledObject watches the wait list its workers really use`, () => {
      const objects = render(overlay);
      assert.ok(objects.some((o) => o.kind === 'ScaledObject'));
      assert.deepEqual(scaledObjectMismatches(objects, bullmqWaitKey), []);
    });
  }

  it('a ScaledObject that disagrees with its workers is caught', () => {
    const objects = render('cpu');
    const waitKey = bullmqWaitKey;
    const wrongPrefix = objects.map((o) => (o.kind === 'ConfigMap' ? { ...o, data: { ...o.data, QUEUE_PREFIX: uniquePrefix('other') } } : o));
    assert.match(scaledObjectMismatches(wrongPrefix, waitKey).join('\n'), /listName tserve:models--replica--MiniLM-L6-H384-uncased-sst2:wait, but the workers/);
    const wrongModel = objects.map((o) =>
      o.kind === 'Deployment' && o.metadata.name.startsWith('tserve-worker')
        ? structuredClone({
            ...o,
            spec: {
              ...o.spec,
              template: {
                ...o.spec.template,
                spec: {
                  ...o.spec.template.spec,
                  containers: [{ ...o.spec.template.spec.containers[0], env: [{ name: 'MODEL', value: 'org/another-model' }] }],
                },
              },
            },
          })
        : o,
    );
    assert.match(scaledObjectMismatches(wrongModel, waitKey).join('\n'), /workers of org\/another-model use tserve:models--org--another-model:wait/);
  });
});
