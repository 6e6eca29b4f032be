{{/* Names, labels and the settings every Baton container gets. */}}

{{- define "baton.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "baton.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "baton.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "baton.labels" -}}
helm.sh/chart: {{ include "baton.chart" . }}
app.kubernetes.io/name: {{ include "baton.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: baton
{{- end }}

{{/* The API pods: Deployment selector, Service, PDB, spread, NetworkPolicy, ServiceMonitor. */}}
{{- define "baton.selectorLabels" -}}
app.kubernetes.io/name: {{ include "baton.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: server
{{- end }}

{{- define "baton.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "baton.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "baton.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
Refuses to render what the team tier cannot start with: no Postgres DSN secret, no NATS URL,
no encryption keyring, or credentials where they would land in a ConfigMap.
*/}}
{{- define "baton.validate" -}}
{{- if not .Values.database.existingSecret.name }}
{{- fail "database.existingSecret.name is required: the name of an existing Secret whose key (database.existingSecret.key, default \"url\") holds the Postgres DSN (team tier; the chart never stores secrets)" }}
{{- end }}
{{- if not .Values.database.existingSecret.key }}
{{- fail "database.existingSecret.key must name the key of the DSN in that Secret" }}
{{- end }}
{{- $natsUrl := .Values.nats.url }}
{{- $natsSecret := .Values.nats.existingSecret.name }}
{{- if and (not $natsUrl) (not $natsSecret) }}
{{- fail "a NATS URL is required (team tier): set nats.url (without credentials) or nats.existingSecret.name (a Secret whose key nats.existingSecret.key holds the URL)" }}
{{- end }}
{{- if and $natsUrl $natsSecret }}
{{- fail "set one of nats.url and nats.existingSecret.name, not both" }}
{{- end }}
{{- if and $natsUrl (regexMatch "^[a-z]+://[^/]*@" $natsUrl) }}
{{- fail "nats.url carries credentials: put the URL in a Secret and set nats.existingSecret.name instead" }}
{{- end }}
{{- $auth := .Values.nats.auth }}
{{- $ways := 0 }}
{{- if or $auth.user $auth.passwordKey }}{{ $ways = add1 $ways }}{{ end }}
{{- if $auth.tokenKey }}{{ $ways = add1 $ways }}{{ end }}
{{- if $auth.nkeySeedKey }}{{ $ways = add1 $ways }}{{ end }}
{{- if $auth.credsKey }}{{ $ways = add1 $ways }}{{ end }}
{{- if gt $ways 1 }}
{{- fail "set one way to authenticate to NATS in nats.auth: user with passwordKey, tokenKey, nkeySeedKey or credsKey" }}
{{- end }}
{{- if and (or $auth.user $auth.passwordKey) (not (and $auth.user $auth.passwordKey)) }}
{{- fail "nats.auth.user and nats.auth.passwordKey go together" }}
{{- end }}
{{- if and (gt $ways 0) (not $auth.existingSecret) }}
{{- fail "nats.auth.existingSecret must name the Secret that holds the NATS credentials" }}
{{- end }}
{{- if and .Values.nats.tls.clientCert (not .Values.nats.tls.existingSecret) }}
{{- fail "nats.tls.clientCert needs nats.tls.existingSecret (a Secret with ca.crt, tls.crt and tls.key)" }}
{{- end }}
{{- if and $natsSecret (not .Values.nats.existingSecret.key) }}
{{- fail "nats.existingSecret.key must name the key of the NATS URL in that Secret" }}
{{- end }}
{{- if not .Values.encryption.existingSecret }}
{{- fail "encryption.existingSecret is required: the name of an existing Secret holding the encryption keys, one entry per key (the entry's name is the key id, its value standard base64 of 32 random bytes, e.g. openssl rand -base64 32)" }}
{{- end }}
{{- if not .Values.encryption.activeKey }}
{{- fail "encryption.activeKey is required: the id (an entry of encryption.existingSecret) of the key that encrypts new secrets" }}
{{- end }}
{{- if and .Values.podDisruptionBudget.enabled (not (kindIs "invalid" .Values.podDisruptionBudget.minAvailable)) (not (kindIs "invalid" .Values.podDisruptionBudget.maxUnavailable)) }}
{{- fail "podDisruptionBudget: set one of minAvailable and maxUnavailable (null the other)" }}
{{- end }}
{{- end }}

{{/* A values scalar as an environment string: whole numbers without an exponent. */}}
{{- define "baton.envValue" -}}
{{- if kindIs "float64" . }}
{{- if eq . (floor .) }}{{ int64 . }}{{ else }}{{ . }}{{ end }}
{{- else if kindIs "slice" . }}
{{- join "," . }}
{{- else }}
{{- . }}
{{- end }}
{{- end }}

{{/*
The non-secret BATON_* settings as a YAML map (the ConfigMap's data; the migration Job's env).
`config.<section>.<key>` becomes BATON_<SECTION>__<KEY>, a top-level `config.<key>` BATON_<KEY>.
*/}}
{{- define "baton.configData" -}}
{{- $env := dict }}
{{- range $section, $value := .Values.config }}
{{- if kindIs "map" $value }}
{{- range $key, $v := $value }}
{{- if not (kindIs "invalid" $v) }}
{{- $_ := set $env (printf "BATON_%s__%s" (upper $section) (upper $key)) (include "baton.envValue" $v) }}
{{- end }}
{{- end }}
{{- else if not (kindIs "invalid" $value) }}
{{- $_ := set $env (printf "BATON_%s" (upper $section)) (include "baton.envValue" $value) }}
{{- end }}
{{- end }}
{{- $_ := set $env "BATON_WORKSPACES__CODE_TOOLS" (ternary "true" "false" .Values.codeTools.enabled) }}
{{- range $name, $e := .Values.codeTools.environments }}
{{- range $field, $v := $e }}
{{- $_ := set $env (printf "BATON_WORKSPACES__ENVIRONMENTS__%s__%s" (upper $name) (upper $field)) (include "baton.envValue" $v) }}
{{- end }}
{{- end }}
{{- $_ := set $env "BATON_TIER" "team" }}
{{- $_ := set $env "BATON_AUTH__REQUIRED" "true" }}
{{- $_ := set $env "BATON_HTTP__LISTEN" (printf "0.0.0.0:%d" (int .Values.containerPort)) }}
{{- $_ := set $env "BATON_DATABASE__MIGRATE_ON_START" (ternary "false" "true" .Values.migrations.enabled) }}
{{- if .Values.nats.url }}
{{- $_ := set $env "BATON_BUS__NATS_URL" .Values.nats.url }}
{{- end }}
{{- if .Values.nats.auth.user }}
{{- $_ := set $env "BATON_BUS__NATS_USER" .Values.nats.auth.user }}
{{- end }}
{{- if .Values.nats.tls.required }}
{{- $_ := set $env "BATON_BUS__NATS_TLS_REQUIRED" "true" }}
{{- end }}
{{- toYaml $env }}
{{- end }}

{{/*
Where the NATS credentials and TLS files are (paths, not secrets): set on the pods directly,
like the keyring's, so that the ConfigMap carries no setting named like a credential.
*/}}
{{- define "baton.natsFileEnv" -}}
{{- if .Values.nats.auth.credsKey }}
- name: BATON_BUS__NATS_CREDS_FILE
  value: {{ printf "%s/%s" (include "baton.natsCredsPath" .) .Values.nats.auth.credsKey | quote }}
{{- end }}
{{- with .Values.nats.tls.existingSecret }}
{{- $dir := include "baton.natsTlsPath" $ }}
- name: BATON_BUS__NATS_TLS_CA_FILE
  value: {{ printf "%s/ca.crt" $dir | quote }}
{{- if $.Values.nats.tls.clientCert }}
- name: BATON_BUS__NATS_TLS_CERT_FILE
  value: {{ printf "%s/tls.crt" $dir | quote }}
- name: BATON_BUS__NATS_TLS_KEY_FILE
  value: {{ printf "%s/tls.key" $dir | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/* Where the NATS .creds file and TLS Secret are mounted. */}}
{{- define "baton.natsCredsPath" -}}
/etc/baton/nats-creds
{{- end }}
{{- define "baton.natsTlsPath" -}}
/etc/baton/nats-tls
{{- end }}

{{/* The NATS volume mounts and volumes, when credentials or TLS come as files. */}}
{{- define "baton.natsVolumeMounts" -}}
{{- if .Values.nats.auth.credsKey }}
- name: nats-creds
  mountPath: {{ include "baton.natsCredsPath" . }}
  readOnly: true
{{- end }}
{{- if .Values.nats.tls.existingSecret }}
- name: nats-tls
  mountPath: {{ include "baton.natsTlsPath" . }}
  readOnly: true
{{- end }}
{{- end }}
{{- define "baton.natsVolumes" -}}
{{- if .Values.nats.auth.credsKey }}
- name: nats-creds
  secret:
    secretName: {{ .Values.nats.auth.existingSecret | quote }}
    items:
      - key: {{ .Values.nats.auth.credsKey | quote }}
        path: {{ .Values.nats.auth.credsKey | quote }}
{{- end }}
{{- if .Values.nats.tls.existingSecret }}
- name: nats-tls
  secret:
    secretName: {{ .Values.nats.tls.existingSecret | quote }}
{{- end }}
{{- end }}

{{/* Where the keyring Secret is mounted: crypto.keys_dir. */}}
{{- define "baton.keyringPath" -}}
/etc/baton/keyring
{{- end }}

{{/* Seconds baton may take to exit after SIGTERM. */}}
{{- define "baton.shutdownGraceSecs" -}}
{{- $http := .Values.config.http | default dict }}
{{- int (default 30 $http.shutdown_grace_secs) }}
{{- end }}

{{/* preStop sleep + drain budget + margin: Kubernetes counts preStop in the grace period. */}}
{{- define "baton.terminationGracePeriodSeconds" -}}
{{- add (int .Values.lifecycle.preStopSleepSeconds) (int (include "baton.shutdownGraceSecs" .)) (int .Values.lifecycle.terminationGraceMarginSeconds) }}
{{- end }}

{{/*
The keyring settings: where the keyring Secret is mounted (crypto.keys_dir) and the active
key's id (crypto.active_key). Plain values, not secrets; set on the pods directly so that the
ConfigMap carries no setting named like a credential.
*/}}
{{- define "baton.keyringEnv" -}}
- name: BATON_CRYPTO__KEYS_DIR
  value: {{ include "baton.keyringPath" . | quote }}
- name: BATON_CRYPTO__ACTIVE_KEY
  value: {{ .Values.encryption.activeKey | quote }}
{{- end }}

{{/* Secret-backed env: the DSN, (when from a Secret) the NATS URL, and the NATS credentials. */}}
{{- define "baton.secretEnv" -}}
- name: BATON_DATABASE__URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.database.existingSecret.name | quote }}
      key: {{ .Values.database.existingSecret.key | quote }}
{{- if .Values.nats.existingSecret.name }}
- name: BATON_BUS__NATS_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.nats.existingSecret.name | quote }}
      key: {{ .Values.nats.existingSecret.key | quote }}
{{- end }}
{{- $auth := .Values.nats.auth }}
{{- range $var, $key := dict "BATON_BUS__NATS_PASSWORD" $auth.passwordKey "BATON_BUS__NATS_TOKEN" $auth.tokenKey "BATON_BUS__NATS_NKEY_SEED" $auth.nkeySeedKey }}
{{- if $key }}
- name: {{ $var }}
  valueFrom:
    secretKeyRef:
      name: {{ $auth.existingSecret | quote }}
      key: {{ $key | quote }}
{{- end }}
{{- end }}
{{- end }}
