//! The messages of `xla/service/hlo.proto` (package `xla`, proto3) that the XLA importer reads,
//! written by hand for prost (no protoc at build time), like `import/xplane/proto.rs`. Field
//! numbers follow the .proto exactly; fields we never read are left out and skipped by prost.

/// `message HloProto { HloModuleProto hlo_module = 1; BufferAssignmentProto
/// buffer_assignment = 3; }`
#[derive(Clone, PartialEq, prost::Message)]
pub struct HloProto {
    #[prost(message, optional, tag = "1")]
    pub hlo_module: Option<HloModuleProto>,
    #[prost(message, optional, tag = "3")]
    pub buffer_assignment: Option<BufferAssignmentProto>,
}

/// `message HloModuleProto { string name = 1; string entry_computation_name = 2;
/// repeated HloComputationProto computations = 3; int64 entry_computation_id = 6; ... }`
#[derive(Clone, PartialEq, prost::Message)]
pub struct HloModuleProto {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub entry_computation_name: String,
    #[prost(message, repeated, tag = "3")]
    pub computations: Vec<HloComputationProto>,
    #[prost(int64, optional, tag = "6")]
    pub entry_computation_id: Option<i64>,
}

/// `message HloComputationProto { string name = 1; repeated HloInstructionProto
/// instructions = 2; int64 id = 5; ... }`
#[derive(Clone, PartialEq, prost::Message)]
pub struct HloComputationProto {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, repeated, tag = "2")]
    pub instructions: Vec<HloInstructionProto>,
    #[prost(int64, optional, tag = "5")]
    pub id: Option<i64>,
}

/// `message HloInstructionProto { string name = 1; string opcode = 2; int64 id = 35;
/// repeated int64 called_computation_ids = 38; ... }`
#[derive(Clone, PartialEq, prost::Message)]
pub struct HloInstructionProto {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub opcode: String,
    /// Optional on the wire (proto3 omits 0): absent reads as -1, as the unique-id space does.
    #[prost(int64, optional, tag = "35")]
    pub id: Option<i64>,
    #[prost(int64, repeated, tag = "38")]
    pub called_computation_ids: Vec<i64>,
}

/// `message BufferAssignmentProto { repeated LogicalBufferProto logical_buffers = 1;
/// repeated BufferAlias buffer_aliases = 2; repeated BufferAllocationProto
/// buffer_allocations = 3; repeated HeapSimulatorTrace heap_simulator_traces = 4; }`
#[derive(Clone, PartialEq, prost::Message)]
pub struct BufferAssignmentProto {
    #[prost(message, repeated, tag = "1")]
    pub logical_buffers: Vec<LogicalBufferProto>,
    #[prost(message, repeated, tag = "3")]
    pub buffer_allocations: Vec<BufferAllocationProto>,
    #[prost(message, repeated, tag = "4")]
    pub heap_simulator_traces: Vec<HeapSimulatorTrace>,
}

/// `message LogicalBufferProto { int64 id = 1; int64 size = 2; Location defined_at = 3;
/// int64 color = 4; }`
#[derive(Clone, PartialEq, prost::Message)]
pub struct LogicalBufferProto {
    #[prost(int64, tag = "1")]
    pub id: i64,
    #[prost(int64, tag = "2")]
    pub size: i64,
    #[prost(message, optional, tag = "3")]
    pub defined_at: Option<Location>,
    #[prost(int64, tag = "4")]
    pub color: i64,
}

/// `message LogicalBufferProto.Location { string instruction_name = 2 [deprecated];
/// int64 instruction_id = 4; repeated int64 shape_index = 3; }`
#[derive(Clone, PartialEq, prost::Message)]
pub struct Location {
    #[prost(string, tag = "2")]
    pub instruction_name: String,
    #[prost(int64, optional, tag = "4")]
    pub instruction_id: Option<i64>,
    #[prost(int64, repeated, tag = "3")]
    pub shape_index: Vec<i64>,
}

/// `message BufferAllocationProto { int64 index = 1; int64 size = 2; bool is_thread_local = 3;
/// bool is_tuple = 11; bool is_entry_computation_parameter = 5; bool is_constant = 12;
/// int64 parameter_number = 6; bool maybe_live_out = 7; int64 color = 8;
/// repeated Assigned assigned = 9; }`
#[derive(Clone, PartialEq, prost::Message)]
pub struct BufferAllocationProto {
    #[prost(int64, tag = "1")]
    pub index: i64,
    #[prost(int64, tag = "2")]
    pub size: i64,
    #[prost(bool, tag = "3")]
    pub is_thread_local: bool,
    #[prost(bool, tag = "11")]
    pub is_tuple: bool,
    #[prost(bool, tag = "5")]
    pub is_entry_computation_parameter: bool,
    #[prost(bool, tag = "12")]
    pub is_constant: bool,
    #[prost(int64, tag = "6")]
    pub parameter_number: i64,
    #[prost(bool, tag = "7")]
    pub maybe_live_out: bool,
    #[prost(int64, tag = "8")]
    pub color: i64,
    #[prost(message, repeated, tag = "9")]
    pub assigned: Vec<Assigned>,
}

/// `message BufferAllocationProto.Assigned { int64 logical_buffer_id = 1; int64 offset = 2;
/// int64 size = 3; }`
#[derive(Clone, PartialEq, prost::Message)]
pub struct Assigned {
    #[prost(int64, tag = "1")]
    pub logical_buffer_id: i64,
    #[prost(int64, tag = "2")]
    pub offset: i64,
    #[prost(int64, tag = "3")]
    pub size: i64,
}

/// `message HeapSimulatorTrace { repeated Event events = 1; bool whole_module_simulation = 2;
/// int64 buffer_allocation_index = 3; }`
#[derive(Clone, PartialEq, prost::Message)]
pub struct HeapSimulatorTrace {
    #[prost(message, repeated, tag = "1")]
    pub events: Vec<HeapSimulatorEvent>,
}

/// `message HeapSimulatorTrace.Event { Kind kind = 1; int64 buffer_id = 2;
/// string computation_name = 3; string instruction_name = 4; int64 share_with_canonical_id = 5; }`
/// with `enum Kind { ALLOC = 0; FREE = 1; SHARE_WITH = 2; }` (kept as its number).
#[derive(Clone, PartialEq, prost::Message)]
pub struct HeapSimulatorEvent {
    #[prost(int32, tag = "1")]
    pub kind: i32,
    #[prost(int64, tag = "2")]
    pub buffer_id: i64,
    #[prost(int64, tag = "5")]
    pub share_with_canonical_id: i64,
}
