{{/* The name of every object of the release. */}}
{{- define "pontoon.fullname" -}}
{{- if eq .Release.Name .Chart.Name -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "pontoon.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "pontoon.labels" -}}
{{ include "pontoon.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Leader election: asked for, or needed by more than one replica. */}}
{{- define "pontoon.leaderElect" -}}
{{- if or .Values.leaderElection.enabled (gt (int .Values.replicaCount) 1) -}}true{{- end -}}
{{- end -}}

{{/* A memory quantity (256Mi, 1Gi, 500M, bytes) in MiB, rounded down. */}}
{{- define "pontoon.memoryMiB" -}}
{{- $m := toString . -}}
{{- if hasSuffix "Gi" $m -}}{{ mul (trimSuffix "Gi" $m | int64) 1024 }}
{{- else if hasSuffix "Mi" $m -}}{{ trimSuffix "Mi" $m | int64 }}
{{- else if hasSuffix "Ki" $m -}}{{ div (trimSuffix "Ki" $m | int64) 1024 }}
{{- else if hasSuffix "G" $m -}}{{ div (mul (trimSuffix "G" $m | int64) 1000000000) 1048576 }}
{{- else if hasSuffix "M" $m -}}{{ div (mul (trimSuffix "M" $m | int64) 1000000) 1048576 }}
{{- else -}}{{ div ($m | int64) 1048576 }}
{{- end -}}
{{- end -}}

{{/* Refuses provider-call settings that cannot fit the operator's memory
limit: the calls running at once hold at most sandbox.memoryBudgetMiB
together, and the operator itself about 64 MiB (its RSS with 1000 routes is
under 48 MiB); and a budget that cannot hold one call. */}}
{{/* Leader election must end a leader's writes before a standby may take
over: the renew deadline plus the longest provider call (its deadline and
5 s to stop it) under the lease duration. The operator refuses such flags at
start too; failing here says so before anything is installed. */}}
{{- define "pontoon.checkLeaderElection" -}}
{{- if include "pontoon.leaderElect" . -}}
{{- $le := .Values.leaderElection -}}
{{- $lease := $le.leaseDurationSeconds | int64 -}}
{{- $renew := $le.renewDeadlineSeconds | int64 -}}
{{- $retry := $le.retryPeriodSeconds | int64 -}}
{{- $call := add (.Values.sandbox.deadlineSeconds | int64) 5 -}}
{{- if le $lease (add $renew $call) -}}
{{- fail (printf "leaderElection.leaseDurationSeconds (%d) must be longer than leaderElection.renewDeadlineSeconds (%d) plus the longest provider call (%d s: sandbox.deadlineSeconds and 5 s to stop it), or a leader that stalled could still be writing when a standby takes over: raise the lease duration or lower the others" $lease $renew $call) -}}
{{- end -}}
{{- if gt (mul $retry 2) $renew -}}
{{- fail (printf "leaderElection.retryPeriodSeconds (%d) must be at most half of leaderElection.renewDeadlineSeconds (%d), so that one failed renewal does not end leading" $retry $renew) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "pontoon.checkMemory" -}}
{{- $budget := .Values.sandbox.memoryBudgetMiB | int64 -}}
{{- $each := .Values.sandbox.memoryMiB | int64 -}}
{{- if lt $budget $each -}}
{{- fail (printf "sandbox.memoryBudgetMiB (%d) is less than sandbox.memoryMiB (%d): the provider calls' budget must hold at least one call; raise the budget or lower memoryMiB" $budget $each) -}}
{{- end -}}
{{- with .Values.resources.limits -}}{{- with .memory -}}
{{- $limit := include "pontoon.memoryMiB" . | int64 -}}
{{- $need := add $budget 64 -}}
{{- if gt $need $limit -}}
{{- fail (printf "sandbox.memoryBudgetMiB (%d) + 64 MiB for the operator is %d MiB, more than resources.limits.memory (%s): lower the budget, or raise the limit" $budget $need (toString .)) -}}
{{- end -}}
{{- end -}}{{- end -}}
{{- end -}}

{{/* The API resource (lower-case plural) of a kind, as RBAC names it.
Kubernetes resources are the kind in lower case, pluralised the English
way; the irregular ones are in the table (Endpoints is already plural; the
metrics API serves PodMetrics as `pods`, NodeMetrics as `nodes`). "*" stays
"*": every resource of the group. A custom resource whose CRD chose another
plural is not known here; the operator's calls on it would be forbidden (its
log says so). */}}
{{- define "pontoon.resourceOf" -}}
{{- $irregular := dict "Endpoints" "endpoints" "PodMetrics" "pods" "NodeMetrics" "nodes" -}}
{{- $kind := lower . -}}
{{- if eq . "*" -}}*
{{- else if hasKey $irregular . -}}{{ get $irregular . }}
{{- else if regexMatch "(s|x|ch|sh)$" $kind -}}{{ $kind }}es
{{- else if regexMatch "[^aeiou]y$" $kind -}}{{ trimSuffix "y" $kind }}ies
{{- else -}}{{ $kind }}s
{{- end -}}
{{- end -}}

{{/* Refuses grants (values `grants`) the operator would refuse to read, or
that could not become the RBAC rules they grant, naming the module and the
entry and saying what to write instead. The schema checks only their shape:
its messages give a JSON path and the allowed words but not what a grant
means, and its refusal of a key (propertyNames) pointed at another value
(`/sandbox` for grants.carrier2mount). */}}
{{- define "pontoon.checkGrants" -}}
{{- $verbs := list "get" "list" "create" "apply" "patch" "delete" "exec" -}}
{{- range $module, $entries := .Values.grants -}}
{{- if eq $module "carrier2mount" -}}
{{- fail "grants.carrier2mount: the bundled carrier2mount's grant ships with the chart (files/grants/bundled.yaml) and values cannot change it; remove grants.carrier2mount from your values (a custom module needs a name of its own, its metadata name)" -}}
{{- end -}}
{{- range $i, $g := $entries -}}
{{- $where := printf "grants.%s[%d] (module %s, entry %d)" $module $i $module (add1 $i) -}}
{{- $group := $g.apiGroup | default "" | toString -}}
{{- if not $g.kinds -}}
{{- fail (printf "%s has no kinds: add the kinds it grants, e.g. kinds: [ConfigMap], or kinds: [\"*\"] for every kind of its apiGroup" $where) -}}
{{- end -}}
{{- if not $g.verbs -}}
{{- fail (printf "%s has no verbs: add the verbs it grants, some of %s" $where (join ", " $verbs)) -}}
{{- end -}}
{{- range $g.verbs -}}
{{- if not (has . $verbs) -}}
{{- fail (printf "%s: verb %q is not one a provider module can be granted; write some of %s (apply is server-side apply, exec is exec into a pod)" $where . (join ", " $verbs)) -}}
{{- end -}}
{{- end -}}
{{- $namespaces := "write namespace: target (the mount's target namespace) or namespace: operator (the operator's own)" -}}
{{- if not $g.namespace -}}
{{- fail (printf "%s has no namespace: %s" $where $namespaces) -}}
{{- else if not (has $g.namespace (list "target" "operator")) -}}
{{- fail (printf "%s: namespace %q is neither target nor operator; %s" $where (toString $g.namespace) $namespaces) -}}
{{- end -}}
{{- if eq $group "*" -}}
{{- fail (printf "%s: apiGroup \"*\" matches no call of a module (the operator compares API groups exactly) and would become RBAC rules on every group; write the group of its kinds (\"\" for the core group, apps, batch, ...), one entry per group" $where) -}}
{{- end -}}
{{- if and (has "exec" $g.verbs) (or (ne $group "") (not (or (has "Pod" $g.kinds) (has "*" $g.kinds)))) -}}
{{- fail (printf "%s: exec is exec into a pod, but this entry grants kinds %s of apiGroup %q; move exec to an entry with apiGroup: \"\" and kinds: [Pod]" $where (toJson $g.kinds) $group) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The RBAC rules the grants (values `grants`) of namespace `.scope`
(target or operator) give, one rule per grant entry (pods/exec apart),
commented with the entry. A grant's verbs are the operator's, not RBAC's:
apply is server-side apply, authorized as create for a new object and as
patch for an existing one; exec is create and get of pods/exec (exec over
SPDY is a POST, over a WebSocket a GET, which API servers with
AuthorizePodWebsocketUpgradeCreatePermission authorize as create too). A
grant's `names` (`{mount}-template`, `{mount}-*`) are not rendered as
resourceNames: RBAC cannot express those patterns, nor limit create or
list by name. The operator enforces names itself (a module declaring more is
refused at load, a call outside its scope is denied); RBAC is per kind and
verb. Empty when no grant is for that namespace. */}}
{{- define "pontoon.grantRules" -}}
{{- $scope := .scope -}}
{{- range $module, $entries := .grants -}}
{{- range $i, $g := $entries -}}
{{- if eq $g.namespace $scope -}}
{{- $resources := list -}}
{{- range $g.kinds -}}{{ $resources = append $resources (include "pontoon.resourceOf" .) }}{{- end -}}
{{- $verbs := list -}}
{{- range $g.verbs -}}
{{- if eq . "apply" -}}{{ $verbs = concat $verbs (list "create" "patch") }}
{{- else if ne . "exec" -}}{{ $verbs = append $verbs . }}
{{- end -}}
{{- end }}
# grants.{{ $module }}[{{ $i }}]{{ with $g.names }}, names {{ toJson . }} checked by the operator{{ end }}
{{- with uniq $verbs }}
- apiGroups: [{{ $g.apiGroup | default "" | toString | quote }}]
  resources: {{ uniq $resources | toJson }}
  verbs: {{ toJson . }}
{{- end }}
{{- if has "exec" $g.verbs }}
- apiGroups: [""]
  resources: [pods/exec]
  verbs: [create, get]
{{- end }}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Binds ClusterRole `.role` to the operator's ServiceAccount where mounts
may reach: cluster-wide when mounts.targetNamespaces has "*", else a
RoleBinding in each namespace listed. `.root`: the chart's context. Each
object starts with its `---`. */}}
{{- define "pontoon.bindInTargets" -}}
{{- $root := .root -}}
{{- $role := .role -}}
{{- $allowed := $root.Values.mounts.targetNamespaces -}}
{{- if has "*" $allowed }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ $role }}
  labels:
    {{- include "pontoon.labels" $root | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ $role }}
subjects:
  - kind: ServiceAccount
    name: {{ include "pontoon.fullname" $root }}
    namespace: {{ $root.Release.Namespace }}
{{- else }}
{{- range $allowed }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $role }}
  namespace: {{ . }}
  labels:
    {{- include "pontoon.labels" $root | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ $role }}
subjects:
  - kind: ServiceAccount
    name: {{ include "pontoon.fullname" $root }}
    namespace: {{ $root.Release.Namespace }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Refuses values that would leave a live mount outside the namespaces
mounts may target: with names in mounts.targetNamespaces the operator's
rights are bound there only, so a mount left elsewhere could not be
restored (its uninstall would be refused, leaving its pods on Carrier2).
Helm renders before it changes anything, so `helm upgrade` fails here
with nothing changed. `lookup` reads the cluster during install and
upgrade (and returns nothing for `helm template`). */}}
{{- define "pontoon.checkLiveMounts" -}}
{{- if .Capabilities.APIVersions.Has "gefyra.dev/v1/gefyrabridgemount" -}}
{{- $allowed := .Values.mounts.targetNamespaces -}}
{{- $excluded := concat .Values.mounts.excludedNamespaces (list .Release.Namespace) | uniq -}}
{{- $stranded := list -}}
{{- $mounts := lookup "gefyra.dev/v1" "gefyrabridgemount" (.Values.watchNamespace | default "") "" -}}
{{- range $mount := (get (default dict $mounts) "items" | default list) -}}
{{- $ns := $mount.targetNamespace | default $mount.metadata.namespace -}}
{{- if or (has $ns $excluded) (and (not (has "*" $allowed)) (not (has $ns $allowed))) -}}
{{- $stranded = append $stranded (printf "%s/%s (target namespace %s)" $mount.metadata.namespace $mount.metadata.name $ns) -}}
{{- end -}}
{{- end -}}
{{- if $stranded -}}
{{- fail (printf "these mounts would be left outside the namespaces mounts may target (mounts.targetNamespaces, mounts.excludedNamespaces), where the operator could no longer restore them: %s; delete them first (kubectl delete gbridgemount), or keep their target namespaces allowed" (join ", " $stranded)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
