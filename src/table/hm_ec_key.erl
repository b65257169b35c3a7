%% @doc The per-key core of EC tables, pure: pure op-based add-wins (`pawset') and remove-wins
%% (`prwset') sets of records, with the payload-conflict policies (the Hypermnesia paper, §4.5–4.9,
%% Algorithm 2, and "Payload conflicts" in §4.9).
%%
%% A table is a set of keys; each key holds versions (records). A key's state is
%% `{Seq, Log}': `Seq' the causally stable versions (no timestamps), `Log' the PO-log entries
%% `{Dot, Kind, Payload}' not yet stable. Operations on key K, with dot D and vector Ts:
%% <ul>
%% <li>`{write, Rec, Hlc}': every entry of K that Ts has seen is redundant (Listing 9, second
%% rule), and so is `Seq' (stable entries precede every new operation); the write is stored.</li>
%% <li>`delete': prunes the same way. `pawset': a delete is itself redundant (Listing 9, first
%% rule) and never stored. `prwset': it is stored, and beats concurrent writes.</li>
%% <li>`{delete_object, Rec}': as delete, but only for versions equal to `Rec'.</li>
%% </ul>
%% {@link prepare/3} runs at the origin, before the operation is broadcast (the prepare step
%% of an op-based CRDT): under `term_order' and `lww', a `delete_object' of the record the
%% key shows there becomes a `delete', since the key as its node saw it is that record. Reads
%% then never show a version that lost to the deleted record, and a stable key keeps only
%% the version it shows.
%% Live versions: `pawset' the stable ones and the stored writes; `prwset' the same unless a
%% stored delete is live, minus versions a live `delete_object' names. The conflict policy
%% turns live versions into what reads show: `term_order' (the greatest record in Erlang term
%% order, as in the paper), `lww' (the write with the greatest hybrid logical clock, then
%% origin), or `siblings' (all of them, sorted).
%%
%% {@link stabilize/3}: once every entry of a key is stable, the key keeps what the policy
%% shows without timestamps (`siblings': every live version); {@link compact/3} says when
%% storage alone represents the key, and the table layer then drops its metadata row. A
%% quiescent key costs no metadata, except under `siblings'.
%%
%% {@link join/2}: catching up by state. The key's state at a replica that has delivered what
%% two replicas delivered, from their two states and delivered vectors, without their
%% operations (the join of a dot store with its causal context, as the causal CRDTs of *Delta
%% State Replicated Data Types* join).
%%
%% Invariants: after an effect, `Seq' and the stored entries never contradict (every entry
%% delivered after a version became stable causally follows it and pruned it).
-module(hm_ec_key).

-export([concurrent/2, new/0, new/1, prepare/3, effect/5, stabilize/3, compact/3, live/2, view/3,
         timestamps/1, is_empty/1, join/2]).
-export_type([key_state/0, op/0, ec_type/0, policy/0]).

-type ec_type() :: pawset | prwset.
-type policy() :: term_order | lww | siblings.
-type hlc() :: {integer(), node() | term()}.
-type op() :: {write, tuple(), hlc()} | delete | {delete_object, tuple()}.
-type entry() :: {hm_vv:dot(), write, {tuple(), hlc()}}
               | {hm_vv:dot(), delete, undefined}
               | {hm_vv:dot(), delete_object, tuple()}.
%% Stable versions keep their clock (lww needs it; it is a payload tag, not causal metadata).
-type version() :: {tuple(), hlc() | stable}.
-type key_state() :: {[version()], [entry()]}.

%% @doc A key with no versions.
-spec new() -> key_state().
new() -> {[], []}.

%% @doc A key whose stable versions are what storage shows (no metadata row).
-spec new([tuple()]) -> key_state().
new(Stable) -> {[{R, stable} || R <- Stable], []}.

%% @doc Whether an operation with timestamp `Ts' meets a concurrent one on the key: an
%% unstable entry it has not seen (the conflicts the table's policy resolves).
-spec concurrent(hm_vv:vv(), key_state()) -> boolean().
concurrent(_Ts, {_Seq, []}) -> false;
concurrent(Ts, {_Seq, [{{R, C}, _, _}]}) -> C > hm_vv:get(R, Ts);
concurrent(Ts, {_Seq, Log}) -> lists:any(fun({D, _, _}) -> not hm_vv:contains(D, Ts) end, Log).

%% @doc The operation to broadcast for `Op', given what reads show for the key at its origin,
%% `Shown': under `term_order' and `lww' a `delete_object' of the record shown is a
%% `delete' (it removes every version the origin has seen, the ones the policy hid too);
%% any other operation is itself.
-spec prepare(policy(), op(), [tuple()]) -> op().
prepare(Policy, {delete_object, Rec}, [Rec]) when Policy =/= siblings -> delete;
prepare(_, Op, _) -> Op.

%% @doc Apply a causally delivered operation (the Hypermnesia paper, Algorithm 2 `add'/`delete' with
%% `remove_redundant').
-spec effect(ec_type(), op(), hm_vv:dot(), hm_vv:vv(), key_state()) -> key_state().
effect(_Type, {write, Rec, Hlc}, Dot, _Ts, {[], []}) ->
    %% a key with no version here, the common case under load
    {[], [{Dot, write, {Rec, Hlc}}]};
effect(_Type, {write, Rec, Hlc}, Dot, Ts, {_, [E = {{R, C}, _, _}]}) ->
    %% one entry, the next most common: kept only when concurrent with the write
    case C =< hm_vv:get(R, Ts) of
        true -> {[], [{Dot, write, {Rec, Hlc}}]};
        false -> {[], [E, {Dot, write, {Rec, Hlc}}]}
    end;
effect(Type, Op, Dot, Ts, {Seq, Log}) ->
    Older = fun({D, _, _}) -> hm_vv:contains(D, Ts) end,
    case Op of
        {write, Rec, Hlc} ->
            {[], [E || E <- Log, not Older(E)] ++ [{Dot, write, {Rec, Hlc}}]};
        delete ->
            Kept = [E || E <- Log, not Older(E)],
            case Type of
                pawset -> {[], Kept};
                prwset -> {[], Kept ++ [{Dot, delete, undefined}]}
            end;
        {delete_object, Rec} ->
            Names = fun({_, write, {R, _}}) -> R =:= Rec;
                       ({_, delete_object, R}) -> R =:= Rec;
                       (_) -> false
                    end,
            Kept = [E || E <- Log, not (Older(E) andalso Names(E))],
            Seq1 = [V || V = {R, _} <- Seq, R =/= Rec],
            case Type of
                pawset -> {Seq1, Kept};
                prwset -> {Seq1, Kept ++ [{Dot, delete_object, Rec}]}
            end
    end.

%% @doc The live versions with their clocks (`stable' for a version read back from storage).
-spec live(ec_type(), key_state()) -> [{tuple(), hlc() | stable}].
live(pawset, {Seq, Log}) ->
    Seq ++ [{R, H} || {_, write, {R, H}} <- Log];
live(prwset, {Seq, Log}) ->
    case lists:keymember(delete, 2, Log) of
        true -> [];
        false ->
            Gone = [R || {_, delete_object, R} <- Log],
            Seq ++ [{R, H} || {_, write, {R, H}} <- Log, not lists:member(R, Gone)]
    end.

%% @doc What reads show for the key under the policy: `[]' (absent), one record, or for
%% `siblings' every live version.
-spec view(ec_type(), policy(), key_state()) -> [tuple()].
%% one version, the common case under load, shows itself under every type and policy
view(_, _, {[], [{_, write, {R, _}}]}) -> [R];
view(_, _, {[{R, _}], []}) -> [R];
view(Type, Policy, S) ->
    resolve(Policy, live(Type, S)).

%% The records of the versions the policy shows (shown_versions/2), sorted.
resolve(Policy, Vs) -> lists:usort([R || {R, _} <- shown_versions(Policy, Vs)]).

%% @doc Causal stability (the Hypermnesia paper, §4.7): when every entry's dot is in the stable
%% vector `V', the key keeps without timestamps the live version the policy shows
%% (`siblings': every live version). The others can never show again: every later operation
%% has seen them, and removes them with the shown one (a write, a delete, or a
%% `delete_object' of the shown record, prepared as a delete), or leaves the shown one, which
%% still beats them (a `delete_object' of another record). Otherwise the key is unchanged.
-spec stabilize(ec_type(), policy(), {hm_vv:vv(), key_state()}) -> key_state().
stabilize(_, _, {V, S = {[], [{{R, C}, write, Version}]}}) ->
    %% one write, the common case under load
    case C =< hm_vv:get(R, V) of
        true -> {[Version], []};
        false -> S
    end;
stabilize(Type, Policy, {V, S = {_, Log}}) ->
    case lists:all(fun({D, _, _}) -> hm_vv:contains(D, V) end, Log) of
        true -> {shown_versions(Policy, lists:usort(live(Type, S))), []};
        false -> S
    end.

%% The live versions the policy shows, and a stable key keeps: `term_order' the greatest
%% record, `lww' the write with the greatest clock, `siblings' every one.
shown_versions(siblings, Vs) -> Vs;
shown_versions(_, []) -> [];
shown_versions(term_order, Vs) -> [lists:max(Vs)];
shown_versions(lww, Vs) ->
    %% a stable version precedes every live write, so it only shows when it is alone
    case [{H, V} || V = {_, H} <- Vs, H =/= stable] of
        [] -> [lists:max(Vs)];
        Stamped -> [element(2, lists:max(Stamped))]
    end.

%% @doc The key's state, or `none' when what reads show says it all (no timestamps and no
%% version beside the shown ones): then the table layer keeps no metadata row for the key.
-spec compact(ec_type(), policy(), key_state()) -> key_state() | none.
compact(_, _, {[_], []}) -> none;             % one version: what storage shows
compact(Type, Policy, S = {Seq, []}) ->
    case lists:usort([R || {R, _} <- Seq]) =:= lists:usort(view(Type, Policy, S)) of
        true -> none;
        false -> S
    end;
compact(_, _, S) -> S.

%% @doc Timestamps (dots) the key holds.
-spec timestamps(key_state()) -> non_neg_integer().
timestamps({_, Log}) -> length(Log).

%% @doc No version and no entry: the key can be forgotten.
-spec is_empty(key_state()) -> boolean().
is_empty({[], []}) -> true;
is_empty(_) -> false.

%% @doc Catching up by state: the key's state at a replica that has delivered both `V1' and
%% `V2' (downward closed), from the key's state `S1' at a replica that delivered `V1' and
%% `S2' at one that delivered `V2'. It shows what applying the operations of `V2' that `V1'
%% lacks to `S1' would show, and so on from there (it may keep, as an entry, a version the
%% other side holds as stable: the next stabilization folds it).
%%
%% An entry survives when the other side has not delivered its dot (its operation is new
%% there), or has it still, as an entry or, for a write, as a stable version of the same
%% record and clock; otherwise an operation there superseded it. A stable version survives
%% when the other side holds it as stable too. Stable versions carry no dot, but their dots
%% are stable, so both sides delivered them; and an operation one side has not delivered
%% causally follows every operation the other side holds stable (causal stability, §4.7),
%% so it cannot be concurrent with a stable version.
-spec join({hm_vv:vv(), key_state()}, {hm_vv:vv(), key_state()}) -> key_state().
%% nothing on one side (a key made during a cut on the other side only): the other side's
%% entries the first has not delivered, none of its versions (as the general clause)
join({V1, {[], []}}, {_V2, {_, Log2}}) ->
    {[], [E || E = {D, _, _} <- Log2, not hm_vv:contains(D, V1)]};
join({_V1, {_, Log1}}, {V2, {[], []}}) ->
    {[], [E || E = {D, _, _} <- Log1, not hm_vv:contains(D, V2)]};
%% one unstable entry and no stable version on each side, the common case after a cut (each
%% side's last write of the key): each survives unless the other side delivered it
join({V1, {[], [E1 = {D1, _, _}]}}, {V2, {[], [E2 = {D2, _, _}]}}) when D1 =/= D2 ->
    {[], [E1 || not hm_vv:contains(D1, V2)] ++ [E2 || not hm_vv:contains(D2, V1)]};
join({V1, {Seq1, Log1}}, {V2, {Seq2, Log2}}) ->
    Dots1 = maps:from_list([{D, true} || {D, _, _} <- Log1]),
    Dots2 = maps:from_list([{D, true} || {D, _, _} <- Log2]),
    Log = [E || E <- Log1, survives(E, V2, Dots2, Seq2)]
        ++ [E || E = {D, _, _} <- Log2, not is_map_key(D, Dots1), survives(E, V1, Dots1, Seq1)],
    Both = [S || S <- Seq1, held(S, Seq2)] ++ [S || S <- Seq2, held(S, Seq1)],
    %% one version per record and clock; a version read back from storage (`stable') only
    %% where no clocked one of its record is kept
    Clocked = [R || {R, H} <- Both, H =/= stable],
    {lists:usort([V || V = {R, H} <- Both, H =/= stable orelse not lists:member(R, Clocked)]),
     Log}.

survives({D, Kind, P}, V, Dots, Seq) ->
    not hm_vv:contains(D, V) orelse is_map_key(D, Dots)
        orelse (Kind =:= write andalso held(P, Seq)).

%% Whether a version (or a write's `{Record, Clock}') is among `Seq': the same record, with
%% the same clock unless one was read back from storage.
held({R, H}, Seq) ->
    lists:any(fun({R2, H2}) -> R2 =:= R andalso (H2 =:= H orelse H2 =:= stable orelse H =:= stable)
              end, Seq).
