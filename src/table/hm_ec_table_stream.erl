%% @doc A state in parts: a copy that catches up by state ({@link hm_ec_table_catch_up}) from
%% a large table receives it a part at a time and joins it a part at a time, between its
%% other work, instead of in one step that holds its writers and its memory for the whole
%% table. Part of the per-table core ({@link hm_ec_table}); pure.
%%
%% The sender builds the state as before, at one moment, so that every key of it is as the
%% sender's delivered vector `VP' says, listing its keys (`{left_out, ...}'). When it holds
%% more keys than the option `part_keys', it cuts it into parts of that many keys, each
%% encoded once (a binary outside the process's heap) and shared by every member it goes
%% to. The first part goes as the state itself (`{merge, State}' with `parts => {Id,
%% Count}'), so that whether a copy takes it is decided as for any state; each next one
%% (`{merge_part, Id, I, Part}') once the receiver has acknowledged receiving the one
%% ?WINDOW before it (`{merge_part_ack, Id, I}': every part up to `I' is here). A transfer
%% goes at the pace the receiver takes it.
%%
%% The receiver keeps the parts as they come, encoded, and joins nothing until it has them
%% all: a transfer cut off in the middle (the sender crashed, the network is cut again)
%% leaves its state as it was. A receiver that has had no part for ?STALL_TICKS
%% acknowledges what it has again, and the sender sends again what follows; after
%% ?ABANDON_TICKS the receiver gives the transfer up (and asks for a state again), and the
%% sender forgets a transfer not acknowledged for as long.
%%
%% With every part here, it joins them one per step (the effect `{continue, ...}': its
%% writers and members' operations go between two parts), each part's keys as a whole
%% state's keys are joined, and counts `VP' as delivered with the last: until then the
%% sender's later operations wait in the causal buffer. An operation that `VP' holds and that
%% is delivered meanwhile, on a key already joined, is already in that key's state: its
%% effect is skipped ({@link skips/3}). Meanwhile the copy builds no state and no snapshot
%% for others (those keys are ahead of its delivered vector: a copy that took them would
%% hold their operations twice) and joins no other state. Only `pawset' tables, whose
%% states carry no unstable clear; others send their states as one message.
%%
%% A snapshot for a copy without state ({@link hm_ec_table_transfer}) goes the same way
%% ({@link send_snapshot/3}): parts read as they go, the keys changed meanwhile again in a
%% later part, the last with what every key is then as; the receiver's side is in {@link
%% hm_ec_table_transfer}.
-module(hm_ec_table_stream).
-include("hm_ec_table.hrl").

-export([send_state/3, send_snapshot/3, in_parts/1, touch/2, touch_all/2, acked/4,
         begin_parts/5, part/3, gone/3, join_next/2, tick/1, skips/3, is_ahead/1,
         receiving_other/2, not_taken/3]).
-export_type([stream/0, incoming/0]).

%% a snapshot's keys changed since their part was read go again in the next part once they
%% are this many parts' worth (so that no part is much larger than that), and in the last
%% part in any case
-define(AGAIN_PARTS, 4).

%% a transfer being sent: its id; a state to join or a snapshot to install; the parts after
%% the first, each its keys (read late) or encoded (read at once); those read late and not
%% yet acknowledged, encoded; the last part the receiver acknowledged, the last one sent,
%% the tick of the last acknowledgement; and, until its last part is read, the keys changed
%% here since it began (`none' when read at once)
-type stream() :: #{id := term(), kind := merge | snapshot, parts := tuple(),
                    built := #{pos_integer() => binary()},
                    acked := pos_integer(), sent := pos_integer(), at := non_neg_integer(),
                    touched := #{term() => true} | none}.
%% the transfer being received (its sender, id, the next part awaited, how many there are,
%% the sender's delivered vector, the tick of the last part, the parts here), or being joined
%% (the next part to join instead of the tick, the vector every part is joined under, and
%% the keys joined from the last part only); or a snapshot being received
%% (hm_ec_table_transfer)
-type incoming() :: none
                  | {receiving, node(), term(), pos_integer(), pos_integer(), hm_vv:vv(),
                     non_neg_integer(), #{pos_integer() => binary()}}
                  | {joining, node(), term(), pos_integer(), pos_integer(), hm_vv:vv(),
                     #{term() => true}, #{pos_integer() => binary()}}
                  | hm_ec_table_transfer:incoming().

%%% ---------------------------------------------------------------- the sender

%% @doc Send `State' ({@link hm_ec_table_catch_up:merge_state/2}) to the members `Ms'. A
%% copy that sends its states in parts ({@link in_parts/1}) lists only the keys in the state
%% it builds (`{left_out, Folded, {keys, Keys}}'): their rows and metadata are read here, in
%% parts when there are more keys than a part holds, otherwise into one message.
-spec send_state([node()], {merge, map()} | {merge_none}, #t{}) -> {#t{}, effects()}.
send_state(Ms, {merge, State = #{rows := {left_out, Folded, {keys, Keys}}}},
           T = #t{part_keys = P, parts_late = Late}) ->
    case chunks(Keys, P) of
        [_] ->
            {KeyRows, Meta} = hm_ec_table_catch_up:key_rows(Keys, T),
            Msg = {merge, State#{rows := {left_out, Folded, KeyRows}, meta := Meta}},
            {T, [{send, M, Msg} || M <- Ms]};
        [Chunk1 | Rest] ->
            {KR1, MR1} = hm_ec_table_catch_up:key_rows(Chunk1, T),
            %% read late: each part's keys, read when it first goes, and the keys that change
            %% meanwhile noted; read now: every part, each encoded at once (a binary outside
            %% the process's heap, shared by every member it goes to)
            {Parts, First, Touched} =
                case Late of
                    true -> {list_to_tuple(Rest),
                             State#{rows := {left_out, Folded, KR1}, meta := MR1, late => true},
                             #{}};
                    false -> {list_to_tuple([term_to_binary(hm_ec_table_catch_up:key_rows(C, T))
                                             || C <- Rest]),
                              State#{rows := {left_out, Folded, KR1}, meta := MR1},
                              none}
                end,
            Count = tuple_size(Parts) + 1,
            lists:foldl(
              fun(M, {Tx = #t{streams = S, tcsb = B, ticks = N}, Effs}) ->
                      Id = {hm_tcsb:self(B), N, M},
                      Stream = #{id => Id, kind => merge, parts => Parts, built => #{},
                                 acked => 1, sent => 1, at => N, touched => Touched},
                      {Tx#t{streams = S#{M => Stream}},
                       Effs ++ [{send, M, {merge, First#{parts => {Id, Count}}}}]}
              end, {T, []}, Ms)
    end;
send_state(Ms, Msg, T) -> {T, [{send, M, Msg} || M <- Ms]}.

%% @doc Send this copy's snapshot to member `M' in parts of `part_keys' keys, `Keys' every
%% key it holds rows or metadata for (more than a part holds: {@link
%% hm_ec_table_transfer:snapshot_keys/1}). The first part goes as the snapshot
%% (`{snapshot, #{rows, meta, parts => {Id, Count}}}'), each next one as a state's parts
%% do; each is read as it goes, the keys changed here since the transfer began go again
%% (read anew) in a later part, and the last carries the delivered vector, the log and the
%% clears every key is then as.
-spec send_snapshot(node(), [term()], #t{}) -> {#t{}, effects()}.
send_snapshot(M, Keys, T = #t{part_keys = P, tcsb = B, ticks = N, streams = S}) ->
    [Chunk1 | Rest] = chunks(Keys, P),
    {KeyRows, Meta} = hm_ec_table_transfer:key_rows(Chunk1, T),
    Id = {hm_tcsb:self(B), N, M},
    Stream = #{id => Id, kind => snapshot, parts => list_to_tuple(Rest), built => #{},
               acked => 1, sent => 1, at => N, touched => #{}},
    {T#t{streams = S#{M => Stream}},
     [{send, M, {snapshot, #{rows => KeyRows, meta => Meta,
                             parts => {Id, length(Rest) + 1}}}}]}.

%% @doc Whether this copy sends its states in parts when they are large enough: a `pawset'
%% table with the option `part_keys' set.
-spec in_parts(#t{}) -> boolean().
in_parts(#t{part_keys = P, type = Type}) -> is_integer(P) andalso Type =:= pawset.

%% `L' cut into lists of `P' elements, in order (the last may hold fewer; `[[]]' for none).
chunks(L, P) -> chunks(L, P, P, [], []).

chunks([], _, _, [], []) -> [[]];
chunks([], _, _, [], Acc) -> lists:reverse(Acc);
chunks([], _, _, C, Acc) -> lists:reverse(Acc, [lists:reverse(C)]);
chunks(L, P, 0, C, Acc) -> chunks(L, P, P, [], [lists:reverse(C) | Acc]);
chunks([X | L], P, Left, C, Acc) -> chunks(L, P, Left - 1, [X | C], Acc).

%% @doc Key `Key' changes here (an operation's effect, or a member's state joined) while
%% states read late are being sent: every transfer that has not read its last part yet
%% sends the key again in it.
-spec touch(term(), #t{}) -> #t{}.
touch(_, T = #t{streams = S}) when map_size(S) =:= 0 -> T;
touch(Key, T = #t{streams = S}) ->
    T#t{streams = maps:map(fun(_, St = #{touched := Ks}) when is_map(Ks) ->
                                   St#{touched := Ks#{Key => true}};
                              (_, St) -> St
                           end, S)}.

%% @doc {@link touch/2} for each of `Keys'.
-spec touch_all([term()], #t{}) -> #t{}.
touch_all(_, T = #t{streams = S}) when map_size(S) =:= 0 -> T;
touch_all(Keys, T) -> lists:foldl(fun touch/2, T, Keys).

%% @doc Member `M' has every part of transfer `Id' up to `I': the parts up to ?WINDOW past it
%% go (again from `I' on when it said `I' before: what followed was lost); the last one ends
%% the transfer here.
-spec acked(node(), term(), pos_integer(), #t{}) -> {#t{}, effects()}.
acked(M, Id, I, T = #t{streams = S, ticks = N}) ->
    case S of
        #{M := Stream = #{id := Id, parts := Parts, acked := Acked, sent := Sent}} ->
            Count = tuple_size(Parts) + 1,
            if
                I >= Count -> {T#t{streams = maps:remove(M, S)}, []};
                I < Acked -> {T, []};                % an old one
                true ->
                    From = case I =:= Acked of
                               true -> I + 1;
                               false -> Sent + 1
                           end,
                    %% the last part is read only while this copy holds no key ahead of
                    %% its delivered vector (joining a state in parts itself): the vector
                    %% it carries must hold every operation its keys do
                    To = case is_ahead(T) of
                             true -> min(Count - 1, I + ?WINDOW);
                             false -> min(Count, I + ?WINDOW)
                         end,
                    %% the parts acknowledged are not sent again
                    Built0 = maps:filter(fun(J, _) -> J > I end, maps:get(built, Stream)),
                    {Stream1, Sends} =
                        lists:foldl(
                          fun(J, {St0, Acc}) ->
                                  {Bin, St1} = part_bin(J, Count, St0, T),
                                  {St1, [{send, M, {merge_part, Id, J, Bin}} | Acc]}
                          end, {Stream#{built := Built0}, []}, seq(From, To)),
                    {T#t{streams = S#{M := Stream1#{acked := I, sent := max(Sent, To),
                                                    at := N}}},
                     lists:reverse(Sends)}
            end;
        _ -> {T, [{send, M, {merge_part_gone, Id}}]}
    end.

%% `From' to `To', none when `To' is before `From' (the last part is held back, and had gone
%% before).
seq(From, To) when From =< To -> lists:seq(From, To);
seq(_, _) -> [].

%% Part `J' of a transfer, encoded: as built before; read now when its keys are read late.
%% Such a part holds the keys of its chunk not changed since the transfer began (those are
%% as the first part's delivered vector says, and as this copy's delivered vector says now);
%% the last one also holds every key changed since, and this copy's delivered vector, which
%% every key of the transfer is as: the receiver joins every part under it. What keeps that
%% join correct is the receiver's side: it takes every key of the last part from the last
%% part only (`join_next/2'); leaving the changed keys out of the parts read here
%% saves their bytes.
part_bin(J, _, Stream = #{built := Built}, _) when is_map_key(J, Built) ->
    {map_get(J, Built), Stream};
part_bin(J, Count, Stream = #{kind := snapshot, parts := Parts, built := Built,
                               touched := Touched}, T) ->
    %% a snapshot's part holds its chunk, each key read now, and the keys changed since
    %% their part was read once they are ?AGAIN_PARTS parts' worth (a key changed again
    %% meanwhile is read once), and the last part all those left: the receiver writes each
    %% part over what it holds of its keys, so a key ends as the last part that holds it
    %% says, and the last part's vector, log and clears are what every key is as then
    Chunk = element(J - 1, Parts),
    Again = J =:= Count orelse map_size(Touched) >= ?AGAIN_PARTS * length(Chunk),
    Keys = case Again of
               true -> maps:keys(maps:merge(Touched, maps:from_keys(Chunk, true)));
               false -> Chunk
           end,
    {KeyRows, Meta} = hm_ec_table_transfer:key_rows(Keys, T),
    Bin = case J =:= Count of
              true -> term_to_binary({KeyRows, Meta, hm_ec_table_transfer:tail(T)});
              false -> term_to_binary({KeyRows, Meta})
          end,
    Touched1 = if J =:= Count -> none; Again -> #{}; true -> Touched end,
    {Bin, Stream#{built := Built#{J => Bin}, touched := Touched1}};
part_bin(J, Count, Stream = #{parts := Parts, built := Built, touched := Touched}, T) ->
    case {Built, element(J - 1, Parts)} of
        {_, Bin} when is_binary(Bin) -> {Bin, Stream};
        {_, Keys} when J < Count ->
            Bin = term_to_binary(hm_ec_table_catch_up:key_rows(
                                   [K || K <- Keys, not is_map_key(K, Touched)], T)),
            {Bin, Stream#{built := Built#{J => Bin}}};
        {_, Keys} ->
            All = maps:keys(maps:merge(Touched, maps:from_keys(Keys, true))),
            {KeyRows, Meta} = hm_ec_table_catch_up:key_rows(All, T),
            Bin = term_to_binary({KeyRows, Meta, hm_tcsb:delivered(T#t.tcsb)}),
            {Bin, Stream#{built := Built#{J => Bin}, touched := none}}
    end.

%%% ---------------------------------------------------------------- the receiver

%% @doc The first part of a transfer of `Count' parts from `From', its keys `{KeyRows, Meta}',
%% taken (as a state is, {@link hm_ec_table_catch_up:merge_asked/4} and the others): the
%% rest is awaited.
-spec begin_parts(node(), {term(), pos_integer()}, hm_vv:vv(), {list(), list()}, #t{}) ->
          {#t{}, effects()}.
begin_parts(From, {Id, Count}, VP, First, T = #t{ticks = N}) ->
    {T#t{incoming = {receiving, From, Id, 2, Count, VP, N, #{1 => term_to_binary(First)}}},
     [{send, From, {merge_part_ack, Id, 1}}]}.

%% @doc Part `I' of transfer `Id' from `From': kept when it is the next one or within
%% ?WINDOW after it; once every part is here, the first is joined.
-spec part(node(), {term(), pos_integer(), term()}, #t{}) -> {#t{}, effects()}.
part(From, {Id, I, Bin}, T = #t{incoming = {receiving, From, Id, Next, Count, _, _, _}})
  when I >= Next, I =< Next + ?WINDOW, I =< Count ->
    case is_part(Bin) of
        true -> keep_part(From, {Id, I, Bin}, T);
        false -> {T, [{drop, {bad_message, T#t.tab, From, {merge_part, Id, I}}}]}
    end;
part(_, _, T) -> {T, []}.

%% Whether a part holds keys as a state does (checked once, on arrival: one joined later is
%% known good, and a copy half through joining a state cannot stop).
is_part(Bin) when is_binary(Bin) ->
    try binary_to_term(Bin) of
        {KeyRows, Meta} -> hm_ec_wire:is_merge_part(KeyRows, Meta);
        {KeyRows, Meta, VP} -> hm_ec_wire:is_merge_part(KeyRows, Meta, VP);
        _ -> false
    catch
        error:badarg -> false
    end;
is_part(_) -> false.

keep_part(From, {Id, I, Bin}, T = #t{incoming = {receiving, From, Id, Next, Count, VP, _, Parts}}) ->
    Parts1 = Parts#{I => Bin},
    Next1 = next_missing(Next, Parts1),
    Ack = [{send, From, {merge_part_ack, Id, Next1 - 1}} || Next1 > Next],
    case Next1 > Count of
        true ->
            %% a state read late: its last part holds the keys changed on the sender while
            %% its parts went (as its last part's vector says); every other key is as it was
            %% read, and as that vector says. Each key changed is joined from the last
            %% part only: as another part holds it, it lacks what changed it since.
            {VPn, Later} =
                case binary_to_term(maps:get(Count, Parts1)) of
                    {KeyRows, Meta, LastVP} ->
                        {hm_vv:join(VP, LastVP),
                         maps:from_keys([K || {K, _} <- KeyRows ++ Meta], true)};
                    _ -> {VP, #{}}
                end,
            {T#t{incoming = {joining, From, Id, 1, Count, VPn, Later, Parts1}},
             Ack ++ [{continue, {join_part, Id}}]};
        false ->
            {T#t{incoming = {receiving, From, Id, Next1, Count, VP, T#t.ticks, Parts1}}, Ack}
    end.

next_missing(I, Parts) when is_map_key(I, Parts) -> next_missing(I + 1, Parts);
next_missing(I, _) -> I.

%% @doc The other end no longer wants transfer `Id': a sender that forgot it (or restarted),
%% and this copy gives it up while it has not every part (and asks for a state again when
%% it still lacks one); or a receiver that did not take it ({@link not_taken/3}), and this
%% copy sends no more of it.
-spec gone(node(), term(), #t{}) -> {#t{}, effects()}.
gone(From, Id, T = #t{incoming = {receiving, From, Id, _, _, _, _, _}}) ->
    {T#t{incoming = none}, []};
gone(From, Id, T = #t{streams = S}) ->
    case S of
        #{From := #{id := Id}} -> {T#t{streams = maps:remove(From, S)}, []};
        _ -> {T, []}
    end.

%% @doc After the first part of a transfer from `From' was looked at (`T' is the state
%% after): when this copy did not take it (it is receiving or joining another, or does not
%% lack it), the sender is told, and drops the rest of it.
-spec not_taken(node(), {merge, map()}, #t{}) -> effects().
not_taken(From, {merge, #{parts := {Id, Count}}}, #t{incoming = In}) when Count > 1 ->
    case In of
        {receiving, From, Id, _, _, _, _, _} -> [];
        {joining, From, Id, _, _, _, _, _} -> [];
        _ -> [{send, From, {merge_part_gone, Id}}]
    end;
not_taken(_, _, _) -> [].

%% @doc The next part of transfer `Id', every part of which is here, joined; with the last,
%% the sender's delivered vector counts as delivered.
-spec join_next(term(), #t{}) -> {#t{}, effects()}.
join_next(Id, T = #t{incoming = {joining, From, Id, I, Count, VP, Later, Parts}}) ->
    Part = binary_to_term(maps:get(I, Parts)),                      % checked on arrival
    {KeyRows, Meta} = case I < Count andalso map_size(Later) > 0 of
                          true -> {[KR || KR = {K, _} <- element(1, Part),
                                          not is_map_key(K, Later)],
                                   [M || M = {K, _} <- element(2, Part),
                                         not is_map_key(K, Later)]};
                          false -> {element(1, Part), element(2, Part)}
                      end,
    {T1, Keys} = hm_ec_table_catch_up:join_part(KeyRows, Meta, VP, T),
    case I =:= Count of
        true ->
            hm_ec_table_catch_up:joined(From, VP, {parts, Count},
                                        T1#t{incoming = none, ahead = none});
        false ->
            {mark_ahead(Keys, VP, T1#t{incoming = {joining, From, Id, I + 1, Count, VP,
                                                   Later, maps:remove(I, Parts)}}),
             [{continue, {join_part, Id}}]}
    end;
join_next(_, T) -> {T, []}.

%% @doc At a tick: a receiver without a part for ?STALL_TICKS acknowledges what it has
%% again (every ?STALL_TICKS), and gives the transfer up after ?ABANDON_TICKS; the sender
%% forgets the transfers not acknowledged for ?ABANDON_TICKS.
-spec tick(#t{}) -> {#t{}, effects()}.
tick(T0 = #t{ticks = N, streams = S}) ->
    T = T0#t{streams = maps:filter(fun(_, #{at := At}) -> N - At < ?ABANDON_TICKS end, S)},
    case T#t.incoming of
        {receiving, _, _, _, _, _, At, _} when N - At >= ?ABANDON_TICKS ->
            {T#t{incoming = none}, []};
        {receiving, From, Id, Next, _, _, At, _}
          when N - At >= ?STALL_TICKS, (N - At) rem ?STALL_TICKS =:= 0 ->
            {T, [{send, From, {merge_part_ack, Id, Next - 1}}]};
        _ -> {T, []}
    end.

%% @doc Whether the effect of the operation of dot `Dot' on key `Key' is already in the key's
%% state: the key was joined from a part of a state that holds the operation, and the state's
%% last part is still to be joined.
-spec skips(term(), hm_vv:dot(), #t{}) -> boolean().
skips(_, _, #t{ahead = none}) -> false;
skips(Key, Dot, #t{ahead = {VP, Keys}}) ->
    is_map_key(Key, Keys) andalso hm_vv:contains(Dot, VP).

mark_ahead(Keys, VP, T = #t{ahead = Ahead}) ->
    Ks = case Ahead of
             none -> #{};
             {_, Ks0} -> Ks0
         end,
    %% one part's keys into the map of all of them (a merge would walk the whole map)
    T#t{ahead = {VP, lists:foldl(fun(K, Acc) -> Acc#{K => true} end, Ks, Keys)}}.

%% @doc Whether this copy is joining a state in parts: it holds keys ahead of its delivered
%% vector, and builds no state or snapshot for others.
-spec is_ahead(#t{}) -> boolean().
is_ahead(#t{incoming = {joining, _, _, _, _, _, _, _}}) -> true;
is_ahead(_) -> false.

%% @doc Whether a state `From' sends now is not to be joined: this copy is joining one in
%% parts, or receiving one from another member that has not stalled.
-spec receiving_other(node(), #t{}) -> boolean().
receiving_other(_, #t{incoming = {joining, _, _, _, _, _, _, _}}) -> true;
receiving_other(From, #t{incoming = {receiving, Src, _, _, _, _, At, _}, ticks = N}) ->
    Src =/= From andalso N - At < ?STALL_TICKS;
receiving_other(_, _) -> false.
