// Runs n8n's own breaking-change rules for version 3 (the workflow rules of
// dist/modules/breaking-changes/rules/v3/ in an installed n8n 2.41) over workflow files, as n8n's
// "Migration report" would over its database. Used by tests/test_n8n_static.py.
//
//   node n8n_v3_rules.js N8N_MODULES_DIR WORKFLOW.json...
//
// Prints one JSON object: {"rules": [rule ids run], "instanceRules": [ids not about workflows],
// "issues": [{"rule", "workflow", "title", "level"}]}. The one rule that needs n8n's node types
// (always-output-data-multi-output) gets them from the installed packages' nodes.json.
'use strict';
const fs = require('fs');
const path = require('path');

const [modules, ...files] = process.argv.slice(2);
const n8n = path.join(modules, 'n8n');
require(require.resolve('reflect-metadata', { paths: [n8n] }));
const rulesDir = path.join(n8n, 'dist', 'modules', 'breaking-changes', 'rules', 'v3');
const { groupNodesByType } = require(
  path.join(n8n, 'dist', 'modules', 'breaking-changes', 'group-nodes-by-type'),
);

function nodeTypes() {
  const descriptions = new Map();
  for (const [pkg, prefix] of [
    ['n8n-nodes-base', 'n8n-nodes-base.'],
    ['@n8n/n8n-nodes-langchain', '@n8n/n8n-nodes-langchain.'],
  ]) {
    const file = path.join(modules, pkg, 'dist', 'types', 'nodes.json');
    for (const d of JSON.parse(fs.readFileSync(file, 'utf8'))) {
      const name = d.name.startsWith(prefix) ? d.name : prefix + d.name;
      for (const v of [].concat(d.version ?? 1)) descriptions.set(`${name}@${v}`, d);
    }
  }
  return {
    getByNameAndVersion(type, version) {
      const description = descriptions.get(`${type}@${version}`);
      if (!description) throw new Error(`unknown node type ${type}@${version}`);
      return { description };
    },
  };
}

async function main() {
  const types = nodeTypes();
  const rules = [];
  const instanceRules = [];
  for (const file of fs.readdirSync(rulesDir).filter((f) => f.endsWith('.js'))) {
    for (const Rule of Object.values(require(path.join(rulesDir, file)))) {
      if (typeof Rule !== 'function' || !Rule.prototype?.getMetadata) continue;
      const rule = new Rule(types);
      (rule.detectWorkflow || rule.collectWorkflowData ? rules : instanceRules).push(rule);
    }
  }
  const workflows = files.map((f) => ({ file: f, workflow: JSON.parse(fs.readFileSync(f)) }));
  const issues = [];
  for (const rule of rules) {
    for (const { file, workflow } of workflows) {
      const grouped = groupNodesByType(workflow.nodes);
      if (rule.detectWorkflow) {
        const report = await rule.detectWorkflow(workflow, grouped);
        for (const issue of report.issues) issues.push({ rule: rule.id, workflow: file, ...issue });
      } else {
        await rule.collectWorkflowData({ ...workflow, id: file }, grouped);
      }
    }
    if (rule.produceReport) {
      for (const affected of (await rule.produceReport()).affectedWorkflows) {
        for (const issue of affected.issues) {
          issues.push({ rule: rule.id, workflow: affected.workflowId, ...issue });
        }
      }
    }
  }
  process.stdout.write(
    JSON.stringify({
      rules: rules.map((r) => r.id),
      instanceRules: instanceRules.map((r) => r.id),
      issues,
    }),
  );
}

main().catch((error) => {
  process.stderr.write(`${error.stack}\n`);
  process.exit(1);
});
