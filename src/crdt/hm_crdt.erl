%% @doc The CRDT library: one behaviour, one module per type, each type in three flavors
%% (the ChiaVe paper §3–4: op, state and delta behind one interface; the Hypermnesia paper, §2.8–2.10 and
%% §4.4–4.8: pure op-based CRDTs with causal redundancy and causal stability).
%%
%% == Flavors ==
%% <dl>
%% <dt>`state'</dt><dd>A dotted causal container ({@link hm_dcc}) and the version vector of
%% mutations it includes; every mutation's event is the whole new state, delivered by join.
%% Any order, loss and duplication are fine.</dd>
%% <dt>`delta'</dt><dd>The same lattice; a mutation's event is a small delta of that lattice
%% (Almeida et al. delta-mutators) tagged with its origin and causal dependencies.
%% {@link deliver/2} joins a delta once everything it depends on is in the state and buffers it
%% until then ("causal delta-merging"), so out-of-order delivery keeps causal consistency;
%% duplicates are ignored; a lost delta is repaired by {@link merge/2} of full states.</dd>
%% <dt>`op'</dt><dd>Pure op-based (Baquero, Almeida, Shoker): the event is the operation and
%% its vector timestamp; the effect records it in a PO-log, pruning causally redundant entries
%% on every effect; {@link stable/2} moves causally stable entries into a timestamp-free
%% sequential state. {@link deliver/2} does causal delivery itself ({@link hm_causal_buffer}),
%% so it accepts events in any order, any number of times.</dd>
%% </dl>
%%
%% == Types ==
%% `gcounter', `pncounter', `awset', `rwset', `lwwreg', `mvreg', `ewflag', `map'. See
%% docs/crdt.md for their operations and concurrent semantics.
%%
%% == Errors ==
%% Bad input never crashes: `{error, {unknown_type, T}}', `{error, {unknown_flavor, F}}',
%% `{error, {bad_op, Type, Op}}', `{error, {bad_replica, R}}', `{error, {bad_event, E}}',
%% `{error, {bad_crdt, X}}', `{error, {type_mismatch, {T1, F1}, {T2, F2}}}',
%% `{error, {not_supported, merge, op}}', `{error, bad_binary}', `{error, bad_checksum}',
%% `{error, {bad_version, V}}'.
%%
%% == Writing a type ==
%% A type module implements the callbacks below. The lattice callbacks see a container
%% `{Store, Ctx}' and never join (the join is {@link hm_dcc:join/2} for every type); the op
%% callbacks see the type's own PO-log state and never buffer (causal delivery is done here).
-module(hm_crdt).

-export([new/2, mutate/3, deliver/2, merge/2, value/1, stable/2, to_binary/1, from_binary/1]).
-export([type/1, flavor/1, lattice/1, delivered/1, pending/1, metadata/1, is_crdt/1, types/0,
         flavors/0, module/1, is_op/2, drop_pending/2]).
-export([prepare/3, effect/4, coalesce/1]).
-export([value_parts/1, finish_value/1, has_timestamps/1, op_groups/2, stable/3]).
-export_type([crdt/0, type/0, flavor/0, event/0, op/0, replica/0, value_parts/0]).

-type type() :: gcounter | pncounter | awset | rwset | lwwreg | mvreg | ewflag | map.
-type flavor() :: state | delta | op.
-type op() :: term().
-type replica() :: hm_vv:replica().
-type dot() :: hm_vv:dot().

-record(hm_crdt, {type :: type(), flavor :: flavor(), inner :: term()}).
-opaque crdt() :: #hm_crdt{}.
%% A value in two steps (value_parts/1, finish_value/1).
-type value_parts() :: {value, term()} | {sort, list()}.
%% What travels between replicas.
-type event() :: {hm_event, state, type(), {hm_dcc:dcc(), hm_vv:vv()}}
               | {hm_event, delta, type(), hm_causal_buffer:message()}   % a delta or an interval
               | {hm_event, op, type(), hm_causal_buffer:message()}.

%%% ---------------------------------------------------------------- behaviour

%% Whether `Op' is an operation of the type (same for every flavor).
-callback is_op(Op :: op()) -> boolean().

%% --- lattice: state and delta flavors
%% The empty store: `#{}' (dot fun) or `{dm, #{}}' (dot map).
-callback empty_store() -> hm_dcc:store().
%% A type takes fresh dots from the context (hm_node_clock:next_dot/2), one per key it writes:
%% a dot lives under one key only, or the join would drop it from the others. Causal sequence
%% numbers are counted per mutation by this module, apart from dots.
%% Full-state mutator: the new container.
-callback update(Op :: op(), replica(), hm_dcc:dcc()) -> hm_dcc:dcc().
%% Delta mutator: only the delta. Its context holds its new dots and the dots it supersedes,
%% all of keys its store lists, so hm_dcc:join_delta/2 can apply it.
%% join(X, delta(Op, R, X)) = update(Op, R, X).
-callback delta(Op :: op(), replica(), hm_dcc:dcc()) -> hm_dcc:dcc().
%% The value a store shows.
-callback value(hm_dcc:store()) -> term().
%% Optional: reset the store at replica `R' (a map's `{remove, Key}' on an embedded value),
%% full-state and as a delta. Default (hm_map): drop every dot the store holds. A type whose
%% live dots carry more than their own operation (a counter's running total) must override it
%% so that what survives a reset is exactly what the reset did not see.
-callback reset_update(replica(), hm_dcc:dcc()) -> hm_dcc:dcc().
-callback reset_delta(replica(), hm_dcc:dcc()) -> hm_dcc:dcc().
-optional_callbacks([reset_update/2, reset_delta/2]).
%% Optional: the value's elements unsorted, as a list whose lists:sort/1 is value/1 (resp.
%% op_value/1): a set's reader then sorts them in its own process (see value_parts/1).
-callback unsorted_value(hm_dcc:store()) -> list().
-callback op_unsorted_value(OpState :: term()) -> list().
%% Optional: op_timestamps(S) > 0, without counting them.
-callback op_has_timestamps(OpState :: term()) -> boolean().
%% Optional, with stabilize_some/3: the groups of the PO-log an operation names (a set's
%% elements), and causal stability for those groups only. An entry of a group left the
%% PO-log or was made by an operation naming the group, so once the operations that just
%% became stable have named their groups, the others have nothing new to fold.
-callback op_groups(PureOp :: term()) -> [term()].
-callback stabilize_some(StableVV :: hm_vv:vv(), Groups :: [term()], OpState :: term()) -> term().
-optional_callbacks([unsorted_value/1, op_unsorted_value/1, op_has_timestamps/1,
                     op_groups/1, stabilize_some/3]).

%% --- pure op-based flavor
-callback op_new() -> term().
%% prepare: the operation as it travels (may fix e.g. a wall-clock timestamp).
-callback prepare(Op :: op(), replica(), OpState :: term()) -> PureOp :: term().
%% effect: apply a causally delivered operation, pruning what it makes redundant. `Dot' is the
%% operation's own dot, `Ts' its vector timestamp (an entry with dot D precedes it iff
%% hm_vv:contains(D, Ts)).
-callback effect(PureOp :: term(), dot(), Ts :: hm_vv:vv(), OpState :: term()) -> term().
%% Move entries whose dot is in the causally stable vector into timestamp-free state.
-callback stabilize(StableVV :: hm_vv:vv(), OpState :: term()) -> term().
%% Drop every entry that causally precedes `Ts' (a map's `{remove, Key}' on a field).
-callback reset(Ts :: hm_vv:vv(), OpState :: term()) -> term().
-callback op_value(OpState :: term()) -> term().
%% How many timestamps (dots) the PO-log holds.
-callback op_timestamps(OpState :: term()) -> non_neg_integer().

%%% ---------------------------------------------------------------- registry

-define(TYPES, #{gcounter => hm_gcounter, pncounter => hm_pncounter, awset => hm_awset,
                 rwset => hm_rwset, lwwreg => hm_lwwreg, mvreg => hm_mvreg,
                 ewflag => hm_ewflag, map => hm_map}).

%% @doc Every type name.
-spec types() -> [type()].
types() -> lists:sort(maps:keys(?TYPES)).

%% @doc Every flavor name.
-spec flavors() -> [flavor()].
flavors() -> [state, delta, op].

%% @doc The module implementing a type.
-spec module(type()) -> module() | {error, {unknown_type, term()}}.
module(T) ->
    case ?TYPES of
        #{T := M} -> M;
        _ -> {error, {unknown_type, T}}
    end.

%% @doc Whether `Op' is an operation of `Type'.
-spec is_op(type(), op()) -> boolean().
is_op(Type, Op) ->
    case module(Type) of
        {error, _} -> false;
        M -> safe_is_op(M, Op)
    end.

%%% ---------------------------------------------------------------- API

%% @doc A new, empty CRDT of the type and flavor.
-spec new(type(), flavor()) -> crdt() | {error, {unknown_type | unknown_flavor, term()}}.
new(Type, Flavor) ->
    case {module(Type), lists:member(Flavor, flavors())} of
        {{error, _} = E, _} -> E;
        {_, false} -> {error, {unknown_flavor, Flavor}};
        {M, true} -> #hm_crdt{type = Type, flavor = Flavor, inner = new_inner(M, Flavor)}
    end.

new_inner(M, state) -> {hm_dcc:new(M:empty_store()), hm_vv:new()};
new_inner(M, delta) -> {hm_dcc:new(M:empty_store()), hm_causal_buffer:new()};
new_inner(M, op) -> {M:op_new(), hm_causal_buffer:new()}.

%% @doc Apply an operation at replica `Replica'; returns the new CRDT and the event that the
%% other replicas must {@link deliver/2}.
-spec mutate(op(), replica(), crdt()) -> {ok, crdt(), event()} | {error, term()}.
mutate(Op, Replica, C = #hm_crdt{type = T}) ->
    case is_crdt(C) of
        false -> {error, {bad_crdt, C}};
        true ->
            M = module(T),
            case {is_replica(Replica), safe_is_op(M, Op)} of
                {false, _} -> {error, {bad_replica, Replica}};
                {_, false} -> {error, {bad_op, T, Op}};
                {true, true} -> do_mutate(M, Op, Replica, C)
            end
    end;
mutate(_, _, X) -> {error, {bad_crdt, X}}.

is_replica(R) -> not is_function(R) andalso not is_reference(R) andalso not is_pid(R).

safe_is_op(M, Op) -> try M:is_op(Op) catch _:_ -> false end.

do_mutate(M, Op, R, C = #hm_crdt{type = T, flavor = state, inner = {Dcc, V}}) ->
    Inner = {M:update(Op, R, Dcc), hm_vv:increment(R, V)},
    {ok, C#hm_crdt{inner = Inner}, {hm_event, state, T, Inner}};
do_mutate(M, Op, R, C = #hm_crdt{type = T, flavor = delta, inner = {Dcc, CB}}) ->
    Delta = M:delta(Op, R, Dcc),
    Dcc1 = hm_dcc:join_delta(Dcc, Delta),
    {Ts, CB1} = hm_causal_buffer:send_msg(R, CB),
    {ok, C#hm_crdt{inner = {Dcc1, CB1}}, {hm_event, delta, T, {R, Ts, Delta}}};
do_mutate(M, Op, R, C = #hm_crdt{type = T, flavor = op, inner = {S, CB}}) ->
    PureOp = M:prepare(Op, R, S),
    {Ts, CB1} = hm_causal_buffer:send_msg(R, CB),
    S1 = M:effect(PureOp, {R, maps:get(R, Ts)}, Ts, S),
    {ok, C#hm_crdt{inner = {S1, CB1}}, {hm_event, op, T, {R, Ts, PureOp}}}.

%% @doc Apply an event from another replica (or this one: it is then a duplicate and ignored).
%% State: join. Delta and op: causal delivery, buffering what is not ready yet.
-spec deliver(event(), crdt()) -> crdt() | {error, term()}.
deliver({hm_event, state, T, {Dcc = {_, _}, V}} = E,
        C = #hm_crdt{type = T, flavor = state, inner = {D, V0}}) when is_map(V) ->
    try C#hm_crdt{inner = {hm_dcc:join(D, Dcc), hm_vv:join(V0, V)}}
    catch _:_ -> {error, {bad_event, E}}
    end;
deliver({hm_event, F, T, Msg} = E, C = #hm_crdt{type = T, flavor = F, inner = {S, CB}})
  when F =:= delta; F =:= op ->
    case hm_causal_buffer:is_message(Msg) andalso valid_payload(F, module(T), Msg) of
        false -> {error, {bad_event, E}};
        true ->
            try
                {Ready, CB1} = hm_causal_buffer:rcv_msg(Msg, CB),
                C#hm_crdt{inner = {apply_ready(F, module(T), Ready, S), CB1}}
            catch _:_ -> {error, {bad_event, E}}
            end
    end;
deliver(E, #hm_crdt{}) -> {error, {bad_event, E}};
deliver(_, X) -> {error, {bad_crdt, X}}.

%% Checked before buffering, so a bad event can never block good ones behind it.
valid_payload(delta, _M, {_, _, {Store, Ctx}}) -> is_store(Store) andalso is_map(Ctx);
valid_payload(delta, _M, {_, _, _, {Store, Ctx}}) -> is_store(Store) andalso is_map(Ctx);
valid_payload(op, M, {_, _, PureOp}) -> safe_is_op(M, PureOp);
valid_payload(_, _, _) -> false.

is_store({dm, M}) -> is_map(M);
is_store(F) -> is_map(F).

apply_ready(delta, _M, Ready, Dcc) ->
    %% a delta, or an interval's joined deltas (its last element)
    lists:foldl(fun(Msg, Acc) -> hm_dcc:join_delta(Acc, element(tuple_size(Msg), Msg)) end,
                Dcc, Ready);
apply_ready(op, M, Ready, S) ->
    lists:foldl(fun({O, Ts, PureOp}, Acc) -> M:effect(PureOp, {O, maps:get(O, Ts)}, Ts, Acc)
                end, S, Ready).

%% @doc Delta flavor: the events of a list, in order, with every run of deltas of one origin
%% whose sequence numbers follow each other, and that depend on the same deltas of the other
%% origins, joined into one delta-interval (*Delta State
%% Replicated Data Types*, Definition 4), which {@link deliver/2} takes as it takes the deltas
%% it joins: in causal order, once in effect (a prefix of it delivered already is joined again,
%% which changes nothing). A replica then makes one join per run instead of one per delta, and
%% the run's contexts travel as one. Other events are left as they are.
-spec coalesce([event()]) -> [event()].
coalesce(Events) -> lists:reverse(lists:foldl(fun coalesce/2, [], Events)).

coalesce({hm_event, delta, T, {R, Ts2, D2}} = E, [Prev = {hm_event, delta, T, Msg} | Acc])
  when is_map(Ts2) ->
    case Msg of
        {R, Ts1, D1} when is_map(Ts1) -> join_run(R, hm_vv:get(R, Ts1), Ts1, D1, Ts2, D2, E, Prev, Acc);
        {R, First, Ts1, D1} when is_map(Ts1) -> join_run(R, First, Ts1, D1, Ts2, D2, E, Prev, Acc);
        _ -> [E, Prev | Acc]
    end;
coalesce(E, Acc) -> [E | Acc].

%% A delta joins the run when it is the next of its origin and depends on nothing more of the
%% other origins: an interval is ready when its first delta would be, so it waits for
%% nothing its own deltas do not (two origins' runs that each depend on a delta inside the
%% other's would wait for each other for ever).
join_run(R, First, Ts1, D1, Ts2, D2, E, Prev = {hm_event, delta, T, _}, Acc) ->
    case hm_vv:get(R, Ts2) =:= hm_vv:get(R, Ts1) + 1 andalso
        maps:remove(R, Ts1) =:= maps:remove(R, Ts2) of
        true -> [{hm_event, delta, T, {R, First, Ts2, hm_dcc:join_deltas(D1, D2)}} | Acc];
        false -> [E, Prev | Acc]
    end.

%% @doc Op flavor, when the caller does causal delivery itself (a tagged causal broadcast
%% shared by many CRDTs, as the tables do): the operation as it travels ("prepare" of pure
%% op-based CRDTs), without applying it. Apply it everywhere, the origin included, with
%% {@link effect/4} and the broadcast's dot and vector timestamp.
-spec prepare(op(), replica(), crdt()) -> {ok, term()} | {error, term()}.
prepare(Op, Replica, C = #hm_crdt{type = T, flavor = op, inner = {S, _}}) ->
    M = module(T),
    case {is_replica(Replica), safe_is_op(M, Op)} of
        {false, _} -> {error, {bad_replica, Replica}};
        {_, false} -> {error, {bad_op, T, Op}};
        {true, true} ->
            case is_crdt(C) of
                true -> {ok, M:prepare(Op, Replica, S)};
                false -> {error, {bad_crdt, C}}
            end
    end;
prepare(_, _, X) -> {error, {bad_crdt, X}}.

%% @doc Op flavor: apply an operation {@link prepare/3} made, delivered by the caller in
%% causal order exactly once, with its dot `{Origin, N}' and vector timestamp `Ts' (which
%% holds every operation it causally follows, its own dot included). `Ts' counts as
%% delivered, so {@link stable/2} with the broadcast's stable vector compacts it.
-spec effect(term(), hm_vv:dot(), hm_vv:vv(), crdt()) -> crdt() | {error, term()}.
effect(PureOp, Dot = {_, N}, Ts, C = #hm_crdt{type = T, flavor = op, inner = {S, CB}})
  when is_integer(N), N > 0, is_map(Ts) ->
    M = module(T),
    case safe_is_op(M, PureOp) of
        false -> {error, {bad_event, PureOp}};
        true ->
            {_, CB1} = hm_causal_buffer:advance(Ts, CB),
            C#hm_crdt{inner = {M:effect(PureOp, Dot, Ts, S), CB1}}
    end;
effect(PureOp, _, _, #hm_crdt{}) -> {error, {bad_event, PureOp}};
effect(_, _, _, X) -> {error, {bad_crdt, X}}.

%% @doc Join two replicas' states (state and delta flavors). A delta replica then delivers
%% any buffered delta that became ready.
-spec merge(crdt(), crdt()) -> crdt() | {error, term()}.
merge(A = #hm_crdt{type = T, flavor = state, inner = {D1, V1}},
      #hm_crdt{type = T, flavor = state, inner = {D2, V2}}) ->
    A#hm_crdt{inner = {hm_dcc:join(D1, D2), hm_vv:join(V1, V2)}};
merge(A = #hm_crdt{type = T, flavor = delta, inner = {D1, CB}},
      #hm_crdt{type = T, flavor = delta, inner = {D2, CB2}}) ->
    %% the other state holds the effect of every delta it delivered; its buffered deltas
    %% come along, so merge loses nothing and is commutative
    D = hm_dcc:join(D1, D2),
    {Ready, CB1} = hm_causal_buffer:advance(hm_causal_buffer:delivered(CB2), CB),
    {Ready2, CB3} = lists:foldl(fun(Msg, {Acc, CBx}) ->
                                        {R, CBy} = hm_causal_buffer:rcv_msg(Msg, CBx),
                                        {Acc ++ R, CBy}
                                end, {Ready, CB1}, hm_causal_buffer:pending(CB2)),
    A#hm_crdt{inner = {apply_ready(delta, module(T), Ready2, D), CB3}};
merge(#hm_crdt{type = T, flavor = op}, #hm_crdt{type = T, flavor = op}) ->
    {error, {not_supported, merge, op}};
merge(#hm_crdt{type = T1, flavor = F1}, #hm_crdt{type = T2, flavor = F2}) ->
    {error, {type_mismatch, {T1, F1}, {T2, F2}}};
merge(#hm_crdt{}, X) -> {error, {bad_crdt, X}};
merge(X, _) -> {error, {bad_crdt, X}}.

%% @doc Delta and op flavors: forget the buffered events whose origin `Gone' says is gone for
%% good, e.g. a replica id that restarted without its state under a new id. Such an event
%% waits for an earlier one of its origin; if that one died with the origin, it can never be
%% delivered and would stay buffered forever, and a delta replica's {@link merge/2} would copy
%% it to every replica. Dropping is safe for convergence: an event some replica delivered
%% reaches the others by delivery or merge. Delivered events and the state flavor are
%% unchanged.
-spec drop_pending(fun((replica()) -> boolean()), crdt()) -> crdt().
drop_pending(Gone, C = #hm_crdt{flavor = F, inner = {S, CB}})
  when F =/= state, is_function(Gone, 1) ->
    C#hm_crdt{inner = {S, hm_causal_buffer:drop_origins(Gone, CB)}};
drop_pending(_Gone, C = #hm_crdt{}) -> C.

%% @doc The value the replica shows (see docs/crdt.md for each type's shape).
-spec value(crdt()) -> term().
value(#hm_crdt{type = T, flavor = op, inner = {S, _}}) -> (module(T)):op_value(S);
value(#hm_crdt{type = T, flavor = state, inner = {{Store, _}, _}}) -> (module(T)):value(Store);
value(#hm_crdt{type = T, flavor = delta, inner = {{Store, _}, _}}) -> (module(T)):value(Store).

%% @doc {@link value/1} in two steps, for a process that holds the CRDT and answers readers:
%% `value_parts(C)' costs what listing the value's elements costs, and `finish_value/1', in
%% the reader's process, makes the value of it (a set's 10,000 elements: the listing takes
%% a tenth of the sort, which the reader then makes). `finish_value(value_parts(C)) =:=
%% value(C)'.
-spec value_parts(crdt()) -> value_parts().
value_parts(C = #hm_crdt{type = T, flavor = F, inner = I}) ->
    M = module(T),
    case {F, I} of
        {op, {S, _}} ->
            case erlang:function_exported(M, op_unsorted_value, 1) of
                true -> {sort, M:op_unsorted_value(S)};
                false -> {value, value(C)}
            end;
        {_, {{Store, _}, _}} ->
            case erlang:function_exported(M, unsorted_value, 1) of
                true -> {sort, M:unsorted_value(Store)};
                false -> {value, value(C)}
            end
    end.

%% @doc The value {@link value_parts/1} gave the parts of.
-spec finish_value(value_parts()) -> term().
finish_value({sort, L}) -> lists:sort(L);
finish_value({value, V}) -> V.

%% @doc Op flavor: whether the replica holds timestamps ({@link metadata/1} `> 0'), without
%% counting them where the type can tell (a set of 10,000 elements counts each one's).
%% State and delta flavors: `false'.
-spec has_timestamps(crdt()) -> boolean().
has_timestamps(C = #hm_crdt{type = T, flavor = op, inner = {S, _}}) ->
    M = module(T),
    case erlang:function_exported(M, op_has_timestamps, 1) of
        true -> M:op_has_timestamps(S);
        false -> metadata(C) > 0
    end;
has_timestamps(#hm_crdt{}) -> false.

%% @doc Op flavor: compact every PO-log entry whose dot is in `StableVV'. The caller computes
%% that vector as the Hypermnesia paper, Algorithm 1 "check stability" does: the pointwise minimum, over
%% every replica J, of the timestamp of the last message this replica delivered from J (and of
%% its own delivered vector). The minimum of the replicas' current delivered vectors is NOT
%% enough: a replica may have sent an operation concurrent with a dot before delivering it.
%% The vector is capped at what this replica has delivered. Other flavors: unchanged.
-spec stable(hm_vv:vv(), crdt()) -> crdt().
stable(V, C = #hm_crdt{type = T, flavor = op, inner = {S, CB}}) when is_map(V) ->
    Cap = hm_vv:meet(V, hm_causal_buffer:delivered(CB)),
    C#hm_crdt{inner = {(module(T)):stabilize(Cap, S), CB}};
stable(_, C = #hm_crdt{}) -> C.

%% @doc Op flavor: the groups of the PO-log an operation of `Type' names ({@link stable/3}),
%% or `all' where the type does not keep its log by group.
-spec op_groups(type(), term()) -> [term()] | all.
op_groups(Type, PureOp) ->
    M = module(Type),
    case is_atom(M) andalso erlang:function_exported(M, op_groups, 1) andalso
        erlang:function_exported(M, stabilize_some, 3) andalso safe_is_op(M, PureOp) of
        true -> M:op_groups(PureOp);
        false -> all
    end.

%% @doc {@link stable/2} for the groups `Groups' of the PO-log only (`all': every group):
%% the groups the operations that just became stable named ({@link op_groups/2}). A group
%% none of them named holds an entry that was not stable before and is not now, or was
%% folded already, so the result is that of {@link stable/2} whenever every operation that
%% became stable since the last call had its groups named. A set of 10,000 elements then
%% costs what became stable instead of a pass over every element.
-spec stable(hm_vv:vv(), [term()] | all, crdt()) -> crdt().
stable(V, all, C) -> stable(V, C);
stable(V, Groups, C = #hm_crdt{type = T, flavor = op, inner = {S, CB}})
  when is_map(V), is_list(Groups) ->
    M = module(T),
    case erlang:function_exported(M, stabilize_some, 3) of
        true ->
            Cap = hm_vv:meet(V, hm_causal_buffer:delivered(CB)),
            C#hm_crdt{inner = {M:stabilize_some(Cap, Groups, S), CB}};
        false -> stable(V, C)
    end;
stable(_, _, C = #hm_crdt{}) -> C.

%%% ---------------------------------------------------------------- encoding

-define(MAGIC, "HMCR").
-define(VERSION, 1).

%% @doc Self-describing binary: magic, version, CRC-32 of the payload, payload.
-spec to_binary(crdt()) -> binary().
to_binary(#hm_crdt{type = T, flavor = F, inner = I}) ->
    Payload = term_to_binary({T, F, I}, [{minor_version, 2}]),
    <<?MAGIC, ?VERSION, (erlang:crc32(Payload)):32, Payload/binary>>.

%% @doc Inverse of {@link to_binary/1}. Anything it did not produce gives `{error, _}'.
-spec from_binary(binary()) -> {ok, crdt()} | {error, term()}.
from_binary(<<?MAGIC, ?VERSION, Crc:32, Payload/binary>>) ->
    case erlang:crc32(Payload) of
        Crc ->
            try binary_to_term(Payload) of
                {T, F, I} ->
                    C = #hm_crdt{type = T, flavor = F, inner = I},
                    case is_crdt(C) of
                        true -> {ok, C};
                        false -> {error, bad_binary}
                    end;
                _ -> {error, bad_binary}
            catch _:_ -> {error, bad_binary}
            end;
        _ -> {error, bad_checksum}
    end;
from_binary(<<?MAGIC, V, _/binary>>) -> {error, {bad_version, V}};
from_binary(_) -> {error, bad_binary}.

%%% ---------------------------------------------------------------- introspection

%% @doc Whether a term is a CRDT of a known type and flavor.
-spec is_crdt(term()) -> boolean().
is_crdt(#hm_crdt{type = T, flavor = F}) ->
    is_atom(module(T)) andalso lists:member(F, flavors());
is_crdt(_) -> false.

-spec type(crdt()) -> type().
type(#hm_crdt{type = T}) -> T.

-spec flavor(crdt()) -> flavor().
flavor(#hm_crdt{flavor = F}) -> F.

%% @doc The dotted causal container behind a state or delta replica (`undefined' for op).
-spec lattice(crdt()) -> hm_dcc:dcc() | undefined.
lattice(#hm_crdt{flavor = state, inner = {Dcc, _}}) -> Dcc;
lattice(#hm_crdt{flavor = delta, inner = {Dcc, _}}) -> Dcc;
lattice(#hm_crdt{flavor = op}) -> undefined.

%% @doc What the replica has delivered, as a version vector (the input of stability
%% detection: the stable vector is the pointwise minimum over all replicas).
-spec delivered(crdt()) -> hm_vv:vv().
delivered(#hm_crdt{flavor = state, inner = {_, V}}) -> V;
delivered(#hm_crdt{flavor = _, inner = {_, CB}}) -> hm_causal_buffer:delivered(CB).

%% @doc Events buffered because their causal predecessors have not arrived.
-spec pending(crdt()) -> non_neg_integer().
pending(#hm_crdt{flavor = state}) -> 0;
pending(#hm_crdt{inner = {_, CB}}) -> hm_causal_buffer:pending_count(CB).

%% @doc Causal metadata held: op flavor, timestamps in the PO-log; state and delta, live dots
%% in the store plus context entries.
-spec metadata(crdt()) -> non_neg_integer().
metadata(#hm_crdt{type = T, flavor = op, inner = {S, _}}) -> (module(T)):op_timestamps(S);
metadata(#hm_crdt{flavor = state, inner = {Dcc, _}}) -> dcc_metadata(Dcc);
metadata(#hm_crdt{flavor = delta, inner = {Dcc, _}}) -> dcc_metadata(Dcc).

dcc_metadata(Dcc) ->
    length(hm_dcc:dots(Dcc)) + hm_node_clock:size(hm_dcc:context(Dcc)).
