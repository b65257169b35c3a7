%% @doc One simulated EC-table replica, pure: the logic of {@link hm_ec_server} for ONE table,
%% with maps instead of Mnesia tables, driving the same pure cores ({@link hm_tcsb} for tagged
%% causal stable broadcast, seed 000 §4.3–4.8 Algorithm 1; {@link hm_ec_key} for the per-key
%% pure op-based sets, §4.5–4.9 Algorithm 2). Used by {@link hm_sim}.
%%
%% Mirrored from hm_ec_server (async_ec only; no sync waiters):
%% <ul>
%% <li>`rows' is the table (what reads show, Key => [Record]); `meta' holds a key state only
%% while storage alone does not say it all (hm_ec_server:store/4).</li>
%% <li>`clear' deletes every key present, and for `prwset' is kept in `clears' until stable, so
%% it beats concurrent writes arriving later (hm_ec_server:effect/3).</li>
%% <li>state transfer: a replica without state starts `{syncing, Raw}', asks members for a
%% snapshot `{Rows, Meta, Delivered}', installs the first one and delivers what arrived
%% meanwhile (hm_ec_server:install/4); it takes no client operation until then.</li>
%% <li>disc persistence (FEATURES X2 / issue X6): `disc' replicas keep `rows', `meta' and a
%% `dlog' mirroring the `hm_log' table (Dot => Msg until gc, `state' => {Self, Delivered},
%% `clears' => the unstable clears); that, and nothing else (not the hlc), survives a
%% crash.</li>
%% </ul>
%% Every function returns the messages to send (`[{To, Msg}]') and events for the checkers:
%% `{applied, Msg}', `{installed, V}', `{stabilized, Dots}' (dots whose timestamps a
%% stabilization or gc dropped).
-module(hm_sim_replica).

-export([new/4, restart/4, submit/4, handle/3, tick/2, nodeup/2, durable/1, set_members/2,
         rows/1, meta/1, tcsb/1, status/1, clears/1]).
-export_type([replica/0, durable/0, out/0, event/0]).

-type ec_type() :: hm_ec_key:ec_type().
-type policy() :: hm_ec_key:policy().
-type replica() :: #{node := node(), type := ec_type(), policy := policy(),
                     storage := ram | disc, tcsb := hm_tcsb:state(),
                     rows := #{term() => [tuple()]}, meta := #{term() => hm_ec_key:key_state()},
                     dlog := map(), clears := list(),
                     status := ready | {syncing, list(), [node()]},
                     hlc := integer()}.
%% the table's type, policy, storage, and hm_tcsb options (e.g. the retransmission window)
-type spec() :: {ec_type(), policy(), ram | disc, hm_tcsb:opts()}.
-type durable() :: none | {disc, #{term() => [tuple()]}, map(), map()}.
-type out() :: [{node(), term()}].
-type event() :: {applied, hm_tcsb:message()} | {installed, hm_vv:vv()}
               | {stabilized, [hm_vv:dot()]}.

%% @doc A replica with no state (first start, or a ram replica after a crash): it syncs from
%% a member before its state counts (hm_ec_server:new_table/2).
-spec new(node(), term(), [node()], spec()) -> {replica(), out()}.
new(Node, Inc, Members, {Type, Policy, Storage, Opts}) ->
    fresh(Node, Inc, Members, {Type, Policy, Storage, Opts}, #{}, #{}).

fresh(Node, Inc, Members, {Type, Policy, Storage, Opts}, Rows, Meta) ->
    Others = Members -- [Node],
    Status = case Others of [] -> ready; _ -> {syncing, [], []} end,
    R = #{node => Node, type => Type, policy => Policy, storage => Storage, opts => Opts,
          tcsb => hm_tcsb:new({Node, Inc}, Members, #{}, Opts), rows => Rows, meta => Meta,
          dlog => #{}, clears => [], status => Status, hlc => 0},
    {R, [{N, {snapshot_req}} || Others =/= [], N <- Others]}.

%% @doc Restart after a crash from what was durable (`none' for a ram replica).
-spec restart(node(), term(), [node()], {spec(), durable()}) -> {replica(), out()}.
restart(Node, Inc, Members, {Spec, none}) ->
    new(Node, Inc, Members, Spec);
restart(Node, Inc, Members, {Spec = {Type, Policy, disc, Opts}, {disc, Rows, Meta, DLog}}) ->
    case DLog of
        #{state := {Self, Delivered}} ->
            Logged = [M || {{_, _}, M} <- maps:to_list(DLog)],
            B = hm_tcsb:restore_log(Logged, hm_tcsb:new(Self, Members, Delivered, Opts)),
            {#{node => Node, type => Type, policy => Policy, storage => disc, opts => Opts,
               tcsb => B,
               rows => Rows, meta => Meta, dlog => DLog, clears => maps:get(clears, DLog, []),
               status => ready, hlc => 0}, []};
        _ ->
            {R, Out} = fresh(Node, Inc, Members, Spec, Rows, Meta),
            {R#{dlog := DLog}, Out}
    end.

%% @doc What survives a crash.
-spec durable(replica()) -> durable().
durable(#{storage := ram}) -> none;
durable(#{storage := disc, rows := Rows, meta := Meta, dlog := D}) -> {disc, Rows, Meta, D}.

%% @doc A client operation (async_ec: applied here, then broadcast). `Clock' is this node's
%% physical clock reading (simulated) for the hybrid logical clock of lww.
-spec submit({term(), hm_ec_key:op() | {write, tuple()} | clear}, integer(), replica(), node()) ->
          {hm_tcsb:message(), out(), replica(), [event()]}.
submit({Key, Op0}, Clock, R = #{tcsb := B, hlc := H0}, Node) ->
    {Op, H1} = case Op0 of
                   {write, Rec} -> H = max(Clock, H0 + 1), {{write, Rec, {H, Node}}, H};
                   _ -> {Op0, H0}
               end,
    {Msg, Out, B1} = hm_tcsb:broadcast({async, Key, Op}, B),
    {R1, Ev} = apply_op(R#{tcsb := B1, hlc := H1}, Msg),
    {Msg, Out, R1, Ev}.

%% @doc A message from member `From'.
-spec handle(node(), term(), replica()) -> {out(), replica(), [event()]}.
handle(From, {ops, Msgs}, R) ->
    lists:foldl(fun(M, {O, Acc, E}) ->
                        {O1, Acc1, E1} = handle(From, {op, M}, Acc),
                        {O ++ O1, Acc1, E ++ E1}
                end, {[], R, []}, Msgs);
handle(_From, {op, Msg}, R = #{status := {syncing, Raw, E}}) ->
    {[], R#{status := {syncing, [Msg | Raw], E}}, []};
handle(From, {snapshot_req}, R) ->
    {[{From, snapshot(R)}], R, []};
handle(_From, {snapshot, Snap}, R = #{status := {syncing, _, _}}) ->
    install(Snap, R);
handle(From, {snapshot_empty}, R = #{status := {syncing, Raw, E}, tcsb := B, node := Me}) ->
    E1 = lists:usort([From | E]),
    case hm_tcsb:members(B) -- [Me | E1] of
        [] -> install(#{rows => #{}, meta => #{}, delivered => #{}, log => [], clears => []}, R);
        _ -> {[], R#{status := {syncing, Raw, E1}}, []}
    end;
handle(_From, {snapshot, _}, R) ->
    {[], R, []};
handle(_From, {snapshot_empty}, R) ->
    {[], R, []};
handle(_From, {snapshot_none}, R) ->
    {[], R, []};
handle(_From, {op, Msg}, R = #{tcsb := B, hlc := H}) ->
    {Ready, B1} = hm_tcsb:receive_op(Msg, B),
    H1 = lists:foldl(fun({_, _, {_, _, {write, _, {Hx, _}}}}, Acc) -> max(Acc, Hx);
                        (_, Acc) -> Acc
                     end, H, Ready),
    {R1, Ev} = lists:foldl(fun(M, {Acc, E}) ->
                                   {Acc1, E1} = apply_op(Acc, M),
                                   {Acc1, E ++ E1}
                           end, {R#{tcsb := B1, hlc := H1}, []}, Ready),
    {[], R1, Ev};
handle(_From, {ack, Replica, V, Newest}, R = #{tcsb := B}) ->
    {[], R#{tcsb := hm_tcsb:receive_ack(Replica, V, Newest, B)}, []}.

snapshot(#{status := ready, rows := Rows, meta := Meta, tcsb := B, clears := Cs}) ->
    {snapshot, #{rows => Rows, meta => Meta, delivered => hm_tcsb:delivered(B),
                 log => hm_tcsb:log_msgs(B), clears => Cs}};
snapshot(#{status := {syncing, _, _}, tcsb := B}) ->
    case maps:keys(hm_tcsb:delivered(B)) -- [hm_tcsb:self(B)] of
        [] -> {snapshot_empty};
        _ -> {snapshot_none}
    end.

install(#{rows := Rows, meta := Meta, delivered := V, log := Log, clears := Clears},
        R = #{tcsb := Old, status := {syncing, Raw, _}}) ->
    B0 = hm_tcsb:restore_log(Log, hm_tcsb:new(hm_tcsb:self(Old), hm_tcsb:members(Old), V,
                                              maps:get(opts, R))),
    R00 = R#{rows := Rows, meta := Meta, dlog := #{}, tcsb := B0, status := ready,
             clears := Clears},
    R0 = lists:foldl(fun(M, Acc) -> persist(Acc, M) end, persist_clears(R00), Log),
    lists:foldl(fun(M, {O, Acc, E}) ->
                        {O1, Acc1, E1} = handle(node, {op, M}, Acc),
                        {O ++ O1, Acc1, E ++ E1}
                end, {[], R0, [{installed, V}]}, lists:reverse(Raw)).

%% @doc The periodic tick (hm_ec_server:tick_table/3): acks, resend what a member lacks for
%% a tick, ask for a snapshot while syncing, stabilize keys, gc the log.
%% `Up': the members this node can reach now (`nodes()' in the server).
-spec tick([node()], replica()) -> {out(), replica(), [event()]}.
tick(Up, R = #{tcsb := B0}) ->
    Ms = [M || M <- hm_tcsb:members(B0) -- [maps:get(node, R)], lists:member(M, Up)],
    {Resends, B} = lists:foldl(fun(M, {Acc, Bx}) ->
                                       {Msgs, By} = hm_tcsb:resend_due(M, Bx),
                                       {Acc ++ [{M, {ops, Msgs}} || Msgs =/= []], By}
                               end, {[], B0}, Ms),
    Out = [A || A = {M, _} <- hm_tcsb:acks(B0), lists:member(M, Up)]
        ++ Resends
        ++ [{M, {snapshot_req}} || is_tuple(maps:get(status, R)), M <- Ms],
    {R1, Ev} = stabilize(R#{tcsb := B}),
    {Out, R1#{tcsb := hm_tcsb:tick(maps:get(tcsb, R1))}, Ev}.

%% @doc A member is reachable again (maybe a new incarnation without its state): forget what
%% it was known to have; retransmission to it resumes from its next acknowledgement
%% (hm_ec_server nodeup).
-spec nodeup(node(), replica()) -> {out(), replica()}.
nodeup(N, R = #{tcsb := B0}) ->
    {[], R#{tcsb := hm_tcsb:forget_member(N, B0)}}.

%% @doc The table's copy holders changed (hm_ec_server refresh_tables: hm_tcsb:set_members).
-spec set_members([node()], replica()) -> replica().
set_members(Ms, R = #{tcsb := B}) -> R#{tcsb := hm_tcsb:set_members(Ms, B)}.

%%% ------------------------------------------------------------ effects (hm_ec_server)

apply_op(R, Msg) ->
    R1 = effect(R, Msg),
    {persist(R1, Msg), [{applied, Msg}]}.

effect(R = #{rows := Rows, meta := Meta}, {Origin, Ts, {_, _, clear}}) ->
    Keys = lists:usort(maps:keys(Rows) ++ maps:keys(Meta)),
    R1 = lists:foldl(fun(K, Acc) -> apply_key(Acc, Origin, Ts, K, delete) end, R, Keys),
    case R of
        #{type := prwset, clears := Cs} ->
            Handled = maps:from_list([{K, true} || K <- Keys]),
            persist_clears(R1#{clears := [{{Origin, maps:get(Origin, Ts)}, Ts, Handled} | Cs]});
        _ -> R1
    end;
effect(R = #{clears := Cs}, {Origin, Ts, {_, Key, Op}}) ->
    {Cs1, R1} = lists:mapfoldl(
                  fun(C = {{CO, _} = CDot, CTs, Handled}, Acc) ->
                          case maps:is_key(Key, Handled) of
                              true -> {C, Acc};
                              false -> {{CDot, CTs, Handled#{Key => true}},
                                        apply_key(Acc, CO, CTs, Key, delete)}
                          end
                  end, R, lists:reverse(Cs)),
    R2 = apply_key(R1, Origin, Ts, Key, Op),
    case lists:reverse(Cs1) of
        Cs -> R2;
        Cs2 -> persist_clears(R2#{clears := Cs2})
    end.

persist_clears(R = #{storage := disc, dlog := D, clears := Cs}) -> R#{dlog := D#{clears => Cs}};
persist_clears(R) -> R.

persist(R = #{storage := disc, dlog := D, tcsb := B}, {Origin, Ts, _} = Msg) ->
    R#{dlog := D#{{Origin, maps:get(Origin, Ts)} => Msg,
                  state => {hm_tcsb:self(B), hm_tcsb:delivered(B)}}};
persist(R, _) -> R.

apply_key(R = #{type := Type}, Origin, Ts, Key, Op) ->
    KS1 = hm_ec_key:effect(Type, Op, {Origin, maps:get(Origin, Ts)}, Ts, key_state(R, Key)),
    store(R, Key, KS1).

key_state(#{rows := Rows, meta := Meta}, Key) ->
    case Meta of
        #{Key := KS} -> KS;
        _ -> hm_ec_key:new(maps:get(Key, Rows, []))
    end.

store(R = #{type := Type, policy := Policy, rows := Rows, meta := Meta}, Key, KS) ->
    Rows1 = case hm_ec_key:view(Type, Policy, KS) of
                [] -> maps:remove(Key, Rows);
                View -> Rows#{Key => View}
            end,
    Meta1 = case hm_ec_key:compact(Type, Policy, KS) of
                none -> maps:remove(Key, Meta);
                KS1 -> Meta#{Key => KS1}
            end,
    R#{rows := Rows1, meta := Meta1}.

stabilize(R = #{type := Type, policy := Policy, meta := Meta, tcsb := B, clears := Cs}) ->
    V = hm_tcsb:stable(B),
    {R1, Dots} =
        maps:fold(fun(Key, KS = {_, Log}, {Acc, Ds}) ->
                          case hm_ec_key:stabilize(Type, Policy, {V, KS}) of
                              KS -> {Acc, Ds};
                              KS1 -> {store(Acc, Key, KS1), [D || {D, _, _} <- Log] ++ Ds}
                          end
                  end, {R, []}, Meta),
    Clears = [C || C = {D, _, _} <- Cs, not hm_vv:contains(D, V)],
    {Gone, B1} = hm_tcsb:gc_dots(B),
    R2 = case R1 of
             #{storage := disc, dlog := DL} -> R1#{dlog := maps:without(Gone, DL)};
             _ -> R1
         end,
    {persist_clears(R2#{tcsb := B1, clears := Clears}),
     [{stabilized, lists:usort(Dots ++ Gone ++ [D || {D, _, _} <- Cs -- Clears])}]}.

-spec rows(replica()) -> #{term() => [tuple()]}.
rows(#{rows := Rows}) -> Rows.
-spec meta(replica()) -> #{term() => hm_ec_key:key_state()}.
meta(#{meta := M}) -> M.
-spec tcsb(replica()) -> hm_tcsb:state().
tcsb(#{tcsb := B}) -> B.
-spec status(replica()) -> ready | syncing.
status(#{status := ready}) -> ready;
status(_) -> syncing.
-spec clears(replica()) -> list().
clears(#{clears := C}) -> C.
