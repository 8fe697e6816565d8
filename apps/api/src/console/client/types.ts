/** The wire shapes the console reads (snake_case, as the API sends them). Statuses stay plain strings here. */
export interface Approval {
  state: 'requested' | 'granted' | 'denied';
  requested_at?: string;
  decided_at?: string;
  decided_by?: string;
  reason?: string;
  expires_at?: string;
}

export interface Resolution {
  status: string;
  evidence: string;
  by: string;
  at: string;
}

export interface Obligation {
  reason: string;
  owner: string;
  evidence_required: string;
  permitted_actions: string[];
  due_at: string;
  escalation_target: string;
  escalated_at: string | null;
  resolution?: Resolution;
}

export interface Operation {
  id: string;
  execution_id: string;
  key: string;
  connector: string;
  action: string;
  params: Record<string, unknown>;
  irreversible: boolean;
  requires_approval: boolean;
  verification_method: string;
  expected_state: Record<string, unknown> | null;
  depends_on: string[];
  status: string;
  terminal_reason: string | null;
  retry: string;
  attempt: number;
  no_change_required: boolean;
  evidence: Record<string, unknown> | null;
  observation: string | null;
  approval: Approval | null;
  recovery_obligation: Obligation | null;
  retry_of: string | null;
  sent_at: string | null;
  acknowledged_at: string | null;
  created_at: string;
  updated_at: string;
}

export interface OperationDetail extends Operation {
  permitted_resolutions: string[];
  resolution_options: { status: string; permitted: boolean; why: string; check: 'read_back' | null }[];
}

export interface CriterionResult {
  key: string;
  operation: string;
  expect_status: string;
  verdict: 'pass' | 'fail' | 'not_applicable';
  evidence_event_ids: string[];
}

export interface Execution {
  id: string;
  agent_id: string;
  intent: string;
  status: string;
  effects: { summary: string; counts: Record<string, number> };
  failure: { code: string; phase: string; category: string; retryable: boolean; message: string; at: string } | null;
  criteria: { key: string; operation: string; expect_status: string }[];
  criteria_results: CriterionResult[] | null;
  deadline_at: string;
  created_at: string;
  updated_at: string;
  operations: Operation[];
}

export interface ExecutionSummary {
  id: string;
  status: string;
  agent_id: string;
  intent: string;
  created_at: string;
}

export interface QueueItem {
  operation: Operation;
  execution: ExecutionSummary | null;
}

export interface QueuePage {
  data: QueueItem[];
  total: number;
  next_cursor: string | null;
}

export interface ReviewCounts {
  approvals: number;
  manual_reviews: number;
  escalated: number;
  overdue: number;
  as_of: string;
}

export interface TimelineEvent {
  id: string;
  execution_id: string;
  operation_id: string | null;
  seq: number;
  type: string;
  from_status: string | null;
  to_status: string | null;
  data: Record<string, unknown>;
  created_at: string;
}

export interface StatusModel {
  operation: {
    statuses: { status: string; terminal: boolean; retry: string; meaning: string }[];
    terminal_reasons: string[];
  };
  execution: { statuses: string[]; terminal: string[] };
}

export interface ConnectorInfo {
  name: string;
  read_back: boolean;
}
